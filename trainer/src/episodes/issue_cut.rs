//! An issue over its token budget, cut to fit: its beginning and its end
//! kept, a marker line in place of the dropped middle. `localize` and
//! `mcp` cut every issue to `[localize] max_issue_tokens`; `eval` cuts only
//! the issues whose prompt would leave the model no turn (it used to skip
//! them), to what the episode's budget leaves ([`checked_tasks_cut`]).

use std::path::Path;

use crate::error::{bail, Result};
use rollout::chat::ChatTokenizer;
use rollout::episode::driver::prompt_tokens;
use rollout::localization::IssueCut;
use rollout::tasks::Task;

use crate::run_config::RunConfig;

/// An issue shorter than this many tokens after the prompt's fixed part
/// leaves no room worth searching with.
const MIN_ISSUE_TOKENS: usize = 32;

/// `task`'s issue cut to fit: at most `given` (else `[localize]
/// max_issue_tokens`, else half of what the episode's budget leaves after
/// the prompt's fixed part) tokens, and never more than leaves the model a
/// turn. A longer issue keeps its beginning and its end, a marker line in
/// place of the dropped middle.
pub fn fit_issue(tok: &ChatTokenizer, task: &Task, cfg: &RunConfig, given: Option<usize>) -> Result<(String, Option<IssueCut>)> {
    let empty = Task { problem_statement: String::new(), ..task.clone() };
    let fixed = prompt_tokens(tok, &empty, &cfg.episode, &cfg.env.tools)?.1.len();
    let total = cfg.episode.max_total_tokens;
    let most = total.saturating_sub(fixed + cfg.episode.max_turn_tokens);
    if most < MIN_ISSUE_TOKENS {
        bail!(
            "the prompt's fixed part (system prompt and tools) is {fixed} tokens: [episode] max_total_tokens = {total} leaves no room for an issue and a turn of max_turn_tokens = {}; raise max_total_tokens in the config",
            cfg.episode.max_turn_tokens
        );
    }
    let budget = given.or(cfg.localize.max_issue_tokens).unwrap_or(total.saturating_sub(fixed) / 2).clamp(1, most);
    let whole = task.problem_statement.as_str();
    // A long issue is counted a chunk at a time, and cut from a view of its
    // beginning and its end (each with more tokens than the cut keeps), so
    // a 10 MB issue costs what its kept tokens cost, not its size.
    let (view, n_whole) = if whole.len() > LONG_ISSUE_BYTES {
        let n = tok.count_tokens(whole)?;
        if n <= budget {
            (whole.to_string(), None)
        } else {
            (head_and_tail(tok, whole, budget + 64)?, Some(n))
        }
    } else {
        (whole.to_string(), None)
    };
    let issue = view.as_str();
    let encoding = tok.inner().encode(issue, false).map_err(|e| crate::error::format_err!("tokenizing the issue: {e}"))?;
    let n = encoding.len();
    if n <= budget && n_whole.is_none() {
        return Ok((issue.to_string(), None));
    }
    let n_whole = n_whole.unwrap_or(n);
    let offsets = encoding.get_offsets();
    let floor = |i| floor_boundary(issue, i);
    let ceil = |i| ceil_boundary(issue, i);
    // The marker's own tokens come out of the budget; a cut that still
    // tokenizes over it (merges across the seams) gives up a few more.
    let mut keep = budget.saturating_sub(24);
    for _ in 0..8 {
        let head = keep.div_ceil(2);
        let tail = keep - head;
        let head_end = if head == 0 { 0 } else { floor(offsets[head - 1].1.min(issue.len())) };
        let tail_start = if tail == 0 { issue.len() } else { ceil(offsets[n - tail].0.min(issue.len())).max(head_end) };
        let dropped = n_whole.saturating_sub(head + tail);
        let text = format!("{}\n\n[... {dropped} tokens of the issue cut here to fit {budget} ...]\n\n{}", &issue[..head_end], &issue[tail_start..]);
        let len = tok.encode(&text)?.len();
        if len <= budget {
            return Ok((text, Some(IssueCut { tokens: n_whole, dropped_tokens: dropped, max_issue_tokens: budget })));
        }
        keep = keep.saturating_sub(len - budget + 4);
    }
    bail!("the issue ({n_whole} tokens) could not be cut to {budget} tokens: raise --max-issue-tokens")
}

/// The char boundary of `s` at or before `i`.
fn floor_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The char boundary of `s` at or after `i`.
fn ceil_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// Issues longer than this (bytes) are cut from a view of their two ends ([`head_and_tail`]).
const LONG_ISSUE_BYTES: usize = 256 << 10;

/// The beginning and the end of `text`, each at least `tokens` tokens long
/// (or half of the text), joined: what [`fit_issue`] cuts a long issue from.
fn head_and_tail(tok: &ChatTokenizer, text: &str, tokens: usize) -> Result<String> {
    let floor = |i| floor_boundary(text, i);
    let ceil = |i| ceil_boundary(text, i);
    let half = text.len() / 2;
    let mut bytes = (tokens * 8).max(4096);
    loop {
        let take = bytes.min(half);
        let head = &text[..floor(take)];
        let tail = &text[ceil(text.len() - take)..];
        let enough = tok.count_tokens(head)? >= tokens && tok.count_tokens(tail)? >= tokens;
        if enough || take == half {
            return Ok(format!("{head}{tail}"));
        }
        bytes *= 2;
    }
}

/// [`super::checked_tasks`] for `eval`: a task whose prompt leaves the
/// model no turn is cut to fit ([`fit_issue`] to the most the episode
/// leaves) instead of refused; the others are as given. Returns the tasks
/// and how many were cut.
pub fn checked_tasks_cut(path: &Path, cfg: &RunConfig, skip_bad: bool) -> Result<(Vec<Task>, usize)> {
    use crate::error::Context;
    let repos = &cfg.env.repos_dir;
    crate::error::ensure!(repos.is_dir(), "[env] repos_dir {} is not a folder (the task file {} needs its repositories there: `fusegrpo repos fetch`)", repos.display(), path.display());
    let model_dir = lm::hub::resolve_model_dir(&cfg.model.path)?;
    let tok = cfg.chat_tokenizer(&model_dir).with_context(|| format!("tokenizer in {}", cfg.tokenizer_dir(&model_dir).display()))?;
    let limit = cfg.episode.max_total_tokens;
    let over = |task: &Task| prompt_tokens(&tok, task, &cfg.episode, &cfg.env.tools).is_ok_and(|(_, ids)| ids.len() >= limit);
    let cut = |task: &Task| -> Result<Task> {
        let (issue, _) = fit_issue(&tok, task, cfg, Some(usize::MAX))?;
        let t = Task { problem_statement: issue, ..task.clone() };
        let (_, ids) = prompt_tokens(&tok, &t, &cfg.episode, &cfg.env.tools)?;
        crate::error::ensure!(ids.len() < limit, "cut, its prompt is still {} tokens", ids.len());
        Ok(t)
    };
    let fits = |task: &Task| -> Option<String> {
        match prompt_tokens(&tok, task, &cfg.episode, &cfg.env.tools) {
            Ok((_, ids)) if ids.len() >= limit => cut(task).err().map(|e| {
                format!("its prompt is {} tokens, [episode] max_total_tokens = {limit} leaves no room for a turn, and cutting its issue failed: {e:#}", ids.len())
            }),
            Ok(_) => None,
            Err(e) => Some(format!("rendering its prompt: {e}")),
        }
    };
    let tasks = super::checked_with(path, cfg, skip_bad, &fits)?;
    let mut n = 0;
    let tasks = tasks
        .into_iter()
        .map(|t| {
            if over(&t) {
                n += 1;
                cut(&t)
            } else {
                Ok(t)
            }
        })
        .collect::<Result<Vec<Task>>>()?;
    Ok((tasks, n))
}
