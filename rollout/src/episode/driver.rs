//! Runs episodes: all live episodes ask the policy for their next turn at
//! once (so a model batches them), tool calls of a turn run in parallel, and
//! each tool-response block is tokenized once and appended (masked).

use super::prompt::{opening_messages, tool_schemas};
use super::{CallRecord, Episode, EpisodeConfig, MalformedCalls, Phase, StopReason, Thinking, TurnRecord};
use crate::answer::{parse_answer, Answer};
use crate::chat::{ChatRequest, ChatTokenizer};
use crate::efficiency::efficiency;
use crate::policy::{Policy, PolicyError, TurnOutput, TurnRequest};
use crate::repo::{Snapshot, SnapshotStore};
use crate::reward::{score, Gold, RewardConfig};
use crate::tasks::Task;
use crate::toolcall::{parse_tool_calls, ToolCall, ToolCallError};
use crate::tools::{ToolConfig, ToolRunner};
use rayon::prelude::*;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// What episodes run against.
pub struct Env<'a> {
    pub tokenizer: &'a ChatTokenizer,
    pub store: &'a SnapshotStore,
    pub tools: &'a ToolRunner,
    pub reward: &'a RewardConfig,
}

/// Why a rollout stopped (a task that cannot be set up, or the policy).
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error("task {task}: {message}")]
    Task { task: String, message: String },
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("chat format: {0}")]
    Chat(#[from] crate::chat::ChatError),
    /// The caller asked to stop ([`run_episodes_until`]); the episodes were dropped.
    #[error("cancelled after {turns} turns")]
    Cancelled { turns: usize },
}

/// A running episode and what it needs besides its record.
struct Live {
    ep: Episode,
    messages: Vec<Value>,
    snapshot: Arc<Snapshot>,
    gold: Gold,
    pending: Vec<Result<ToolCall, ToolCallError>>,
    started: Instant,
}

/// Gold of a task: explicit, or derived from its patch at the base commit.
pub fn task_gold(task: &Task, snapshot: &Snapshot) -> Result<Gold, RolloutError> {
    if let Some(g) = &task.gold {
        return Ok(g.clone());
    }
    let patch = task.patch.as_deref().ok_or_else(|| RolloutError::Task {
        task: task.instance_id.clone(),
        message: "neither gold nor patch".into(),
    })?;
    crate::tasks::gold::derive_gold(patch, snapshot)
        .map(|r| r.gold)
        .map_err(|e| RolloutError::Task { task: task.instance_id.clone(), message: format!("gold from patch: {e}") })
}

/// A task's tree at its base commit and its gold.
pub fn snapshot_and_gold(env: &Env<'_>, task: &Task) -> Result<(Arc<Snapshot>, Gold), RolloutError> {
    let snapshot = env
        .store
        .get(&task.repo, &task.base_commit)
        .map_err(|e| RolloutError::Task { task: task.instance_id.clone(), message: e.to_string() })?;
    let gold = task_gold(task, &snapshot)?;
    Ok((snapshot, gold))
}

/// The prompt tokens of a task's episode with the tools of `tools`.
pub fn prompt_tokens(tok: &ChatTokenizer, task: &Task, cfg: &EpisodeConfig, tools: &ToolConfig) -> Result<(Vec<Value>, Vec<u32>), RolloutError> {
    issue_prompt_tokens(tok, &task.problem_statement, cfg, tools)
}

/// The prompt tokens of an episode on the issue text `issue`.
fn issue_prompt_tokens(tok: &ChatTokenizer, issue: &str, cfg: &EpisodeConfig, tools: &ToolConfig) -> Result<(Vec<Value>, Vec<u32>), RolloutError> {
    let messages = opening_messages(issue, tools);
    let req = ChatRequest {
        messages: messages.clone(),
        tools: Some(tool_schemas(tools)),
        add_generation_prompt: true,
        enable_thinking: Some(cfg.thinking == Thinking::On),
    };
    let (_, ids) = tok.render_ids(&req)?;
    Ok((messages, ids))
}

/// The tokens every episode's prompt opens with, whatever the issue (the
/// system prompt, the tool schemas and the user turn's fixed start): the
/// longest common prefix of the prompts of a few unlike issue texts. A
/// model policy prefills it once and shares its KV cache. A prompt whose
/// tokens do not start with it (the issue's first characters merged with
/// the fixed text's last ones) is prefilled whole.
pub fn fixed_prefix(tok: &ChatTokenizer, cfg: &EpisodeConfig, tools: &ToolConfig) -> Result<Vec<u32>, RolloutError> {
    const PROBES: [&str; 6] = ["A", "b", " x", "\n", "1", "{"];
    let mut prefix: Option<Vec<u32>> = None;
    for probe in PROBES {
        let (_, ids) = issue_prompt_tokens(tok, probe, cfg, tools)?;
        prefix = Some(match prefix {
            None => ids,
            Some(p) => p.iter().zip(&ids).take_while(|(a, b)| a == b).map(|(a, _)| *a).collect(),
        });
    }
    Ok(prefix.unwrap_or_default())
}

/// Run `group` episodes for each task; `on_done` sees each as it ends.
/// Episodes come back in task order, then sample order. At most
/// [`Policy::max_live`] episodes run at once (whole groups, at least one),
/// the next ones starting as earlier ones end.
pub fn run_episodes(
    policy: &mut dyn Policy,
    env: &Env<'_>,
    tasks: &[Task],
    group: usize,
    cfg: &EpisodeConfig,
    on_done: impl FnMut(&Episode),
) -> Result<Vec<Episode>, RolloutError> {
    run_episodes_until(policy, env, tasks, group, cfg, &Arc::new(AtomicBool::new(false)), on_done)
}

/// [`run_episodes`] that stops once `cancel` is set: at the next turn
/// boundary, or sooner where the policy watches it too
/// ([`Policy::interrupt_on`]; a model stops before its next token). The
/// policy is told every unfinished episode ended, and the result is
/// [`RolloutError::Cancelled`] (what ran is dropped).
pub fn run_episodes_until(
    policy: &mut dyn Policy,
    env: &Env<'_>,
    tasks: &[Task],
    group: usize,
    cfg: &EpisodeConfig,
    cancel: &Arc<AtomicBool>,
    mut on_done: impl FnMut(&Episode),
) -> Result<Vec<Episode>, RolloutError> {
    run_keyed_until(policy, env, tasks, group, cfg, 0, cancel, |e| {
        if let RunEvent::Done(ep) = e {
            on_done(ep)
        }
    })
}

/// What a run tells its caller as it goes ([`run_episodes_watched`]).
pub enum RunEvent<'a> {
    /// The policy took a turn in `episodes` unfinished episodes at once
    /// (their tools ran): the run's `step`-th (1-based) such batch.
    Turn { step: usize, episodes: usize },
    /// An episode ended.
    Done(&'a Episode),
}

/// [`run_episodes_until`] that also tells `on_event` after each batch of
/// turns, not only as each episode ends.
pub fn run_episodes_watched(
    policy: &mut dyn Policy,
    env: &Env<'_>,
    tasks: &[Task],
    group: usize,
    cfg: &EpisodeConfig,
    cancel: &Arc<AtomicBool>,
    on_event: impl FnMut(RunEvent<'_>),
) -> Result<Vec<Episode>, RolloutError> {
    run_keyed_until(policy, env, tasks, group, cfg, 0, cancel, on_event)
}

/// [`run_episodes`] whose episodes are keyed from `first` on (the key a
/// policy sees in [`TurnRequest::episode`], which keys the scripted
/// teacher's variant and a sampling model's random stream): a share of a
/// larger batch, keyed as in the whole batch, plays the episodes the whole
/// batch would (ranks of a data-parallel evaluation).
pub fn run_episodes_keyed(
    policy: &mut dyn Policy,
    env: &Env<'_>,
    tasks: &[Task],
    group: usize,
    cfg: &EpisodeConfig,
    first: u64,
    mut on_done: impl FnMut(&Episode),
) -> Result<Vec<Episode>, RolloutError> {
    run_keyed_until(policy, env, tasks, group, cfg, first, &Arc::new(AtomicBool::new(false)), |e| {
        if let RunEvent::Done(ep) = e {
            on_done(ep)
        }
    })
}

#[allow(clippy::too_many_arguments)]
fn run_keyed_until(
    policy: &mut dyn Policy,
    env: &Env<'_>,
    tasks: &[Task],
    group: usize,
    cfg: &EpisodeConfig,
    first: u64,
    cancel: &Arc<AtomicBool>,
    on_event: impl FnMut(RunEvent<'_>),
) -> Result<Vec<Episode>, RolloutError> {
    policy.interrupt_on(Some(cancel.clone()));
    let result = drive(policy, env, tasks, group, cfg, first, cancel, on_event);
    policy.interrupt_on(None);
    result
}

#[allow(clippy::too_many_arguments)]
fn drive(
    policy: &mut dyn Policy,
    env: &Env<'_>,
    tasks: &[Task],
    group: usize,
    cfg: &EpisodeConfig,
    first: u64,
    cancel: &AtomicBool,
    mut on_event: impl FnMut(RunEvent<'_>),
) -> Result<Vec<Episode>, RolloutError> {
    let cancelled = || cancel.load(Ordering::Relaxed);
    let mut live = start(env, tasks, group, cfg)?;
    let tools = tool_schemas(&env.tools.config);
    let group = group.max(1);
    let cap = policy.max_live().map_or(usize::MAX, |n| (n / group).max(1).saturating_mul(group));
    // Episodes [0, started) have started; the rest wait for room.
    let mut started = 0;
    let mut step = 0;
    loop {
        let running = live[..started].iter().filter(|l| !matches!(l.ep.phase, Phase::Done(_))).count();
        let room = cap.saturating_sub(running) / group * group;
        let end = started.saturating_add(room).min(live.len());
        for l in &mut live[started..end] {
            l.started = Instant::now();
        }
        started = end;
        for l in live[..started].iter_mut().filter(|l| l.ep.phase == Phase::Generating) {
            if l.ep.tokens.len() >= cfg.max_total_tokens {
                l.ep.phase = Phase::Done(StopReason::ContextFull);
            }
        }
        finish_done(&mut live, env.reward, policy, first, &mut on_event);
        let active: Vec<usize> = (0..started).filter(|&i| live[i].ep.phase == Phase::Generating).collect();
        if active.is_empty() {
            if started == live.len() {
                break;
            }
            continue;
        }
        if cancelled() {
            return Err(cancel_all(&live, policy, first));
        }
        let t0 = Instant::now();
        let requests: Vec<TurnRequest<'_>> = active
            .iter()
            .map(|&i| TurnRequest {
                episode: first + i as u64,
                tokens: &live[i].ep.tokens,
                messages: &live[i].messages,
                tools: &tools,
                snapshot: Some(&live[i].snapshot),
                max_new_tokens: cfg.max_turn_tokens.min(cfg.max_total_tokens.saturating_sub(live[i].ep.tokens.len())),
            })
            .collect();
        let outputs = match policy.next_turns(&requests) {
            Err(_) if cancelled() => return Err(cancel_all(&live, policy, first)),
            r => r?,
        };
        if outputs.len() != active.len() {
            return Err(PolicyError { policy: policy.name(), message: format!("{} turns for {} requests", outputs.len(), active.len()) }.into());
        }
        let gen_secs = t0.elapsed().as_secs_f64();
        for (&i, out) in active.iter().zip(outputs) {
            apply_turn(&mut live[i], out, env.tokenizer, cfg, gen_secs)?;
        }
        let t1 = Instant::now();
        live.par_iter_mut().filter(|l| l.ep.phase == Phase::AwaitingTools).for_each(|l| run_tools(l, env.tools));
        let tool_secs = t1.elapsed().as_secs_f64();
        for l in live.iter_mut().filter(|l| l.ep.phase == Phase::AwaitingTools) {
            if let Some(t) = l.ep.turns.last_mut() {
                t.tools_seconds = tool_secs;
            }
            append_responses(l, env.tokenizer, cfg)?;
        }
        step += 1;
        on_event(RunEvent::Turn { step, episodes: active.len() });
        finish_done(&mut live, env.reward, policy, first, &mut on_event);
    }
    Ok(live.into_iter().map(|l| l.ep).collect())
}

/// Releases what the policy keeps for the unfinished episodes of a
/// cancelled run; the error says how many turns had run.
fn cancel_all(live: &[Live], policy: &mut dyn Policy, first: u64) -> RolloutError {
    for (i, _) in live.iter().enumerate().filter(|(_, l)| !matches!(l.ep.phase, Phase::Done(_))) {
        policy.finish(first + i as u64);
    }
    RolloutError::Cancelled { turns: live.iter().map(|l| l.ep.turns.len()).sum() }
}

/// Score every episode that just ended and tell the policy and the caller.
fn finish_done(live: &mut [Live], reward: &RewardConfig, policy: &mut dyn Policy, first: u64, on_event: &mut impl FnMut(RunEvent<'_>)) {
    for (i, l) in live.iter_mut().enumerate() {
        if matches!(l.ep.phase, Phase::Done(_)) && l.ep.score.is_none() {
            finish(l, reward);
            policy.finish(first + i as u64);
            on_event(RunEvent::Done(&l.ep));
        }
    }
}

fn start(env: &Env<'_>, tasks: &[Task], group: usize, cfg: &EpisodeConfig) -> Result<Vec<Live>, RolloutError> {
    let mut live = Vec::with_capacity(tasks.len() * group);
    for task in tasks {
        let (snapshot, gold) = snapshot_and_gold(env, task)?;
        let (messages, ids) = prompt_tokens(env.tokenizer, task, cfg, &env.tools.config)?;
        for sample in 0..group {
            live.push(Live {
                ep: Episode {
                    task_id: task.instance_id.clone(),
                    sample,
                    loss_mask: vec![0; ids.len()],
                    logprobs: vec![0.0; ids.len()],
                    prompt_tokens: ids.len(),
                    tokens: ids.clone(),
                    turns: Vec::new(),
                    phase: Phase::Generating,
                    answer: Vec::new(),
                    score: None,
                    seconds: 0.0,
                },
                messages: messages.clone(),
                snapshot: snapshot.clone(),
                gold: gold.clone(),
                pending: Vec::new(),
                started: Instant::now(),
            });
        }
    }
    Ok(live)
}

/// Append the policy's turn, then decide: answer, tool calls, or a stop.
fn apply_turn(l: &mut Live, out: TurnOutput, tok: &ChatTokenizer, cfg: &EpisodeConfig, secs: f64) -> Result<(), RolloutError> {
    let end = tok.special().end_of_turn;
    let (ids, logprobs) = match out {
        TurnOutput::Tokens { ids, logprobs } => (ids, logprobs),
        TurnOutput::Text(text) => {
            let mut ids = tok.encode(&text)?;
            ids.push(end);
            let n = ids.len();
            (ids, vec![0.0; n])
        }
    };
    let ended = ids.last().is_some_and(|t| tok.stop_ids().contains(t));
    let body = if ended { &ids[..ids.len() - 1] } else { &ids[..] };
    let text = tok.decode(body)?;
    l.ep.tokens.extend_from_slice(&ids);
    l.ep.loss_mask.extend(std::iter::repeat_n(1u8, ids.len()));
    l.ep.logprobs.extend(logprobs.iter().copied().chain(std::iter::repeat(0.0)).take(ids.len()));
    let calls = parse_tool_calls(&text);
    l.messages.push(assistant_message(&text, &calls));
    l.ep.turns.push(TurnRecord { text: text.clone(), tokens: ids.len(), calls: Vec::new(), response_tokens: 0, generate_seconds: secs, tools_seconds: 0.0 });
    l.ep.phase = if !ended {
        Phase::Done(StopReason::MaxTokens)
    } else if calls.is_empty() {
        l.ep.answer = answer_strings(&parse_answer(&text));
        Phase::Done(StopReason::Answer)
    } else if cfg.malformed_calls == MalformedCalls::End && calls.iter().any(Result::is_err) {
        Phase::Done(StopReason::Malformed)
    } else if l.ep.turns.len() >= cfg.max_turns {
        Phase::Done(StopReason::MaxTurns)
    } else {
        l.pending = calls;
        Phase::AwaitingTools
    };
    Ok(())
}

fn run_tools(l: &mut Live, tools: &ToolRunner) {
    let calls = std::mem::take(&mut l.pending);
    let results = tools.run_turn(&l.snapshot, &calls);
    let turn = l.ep.turns.last_mut().expect("a turn precedes its tools");
    turn.calls = calls
        .iter()
        .zip(results)
        .map(|(c, r)| CallRecord {
            name: c.as_ref().ok().map(|c| c.name.clone()),
            arguments: c.as_ref().ok().map(|c| Value::Object(c.arguments.clone())),
            output: r.output,
            entities: r.entities,
            error: r.error,
        })
        .collect();
}

/// Tool responses as the model's chat template lays them out, plus the
/// next assistant header ([`crate::chat::ResponseLayout`]), tokenized once
/// and appended with mask 0.
fn append_responses(l: &mut Live, tok: &ChatTokenizer, cfg: &EpisodeConfig) -> Result<(), RolloutError> {
    let turn = l.ep.turns.last_mut().expect("a turn precedes its responses");
    let outputs: Vec<&str> = turn.calls.iter().map(|c| c.output.as_str()).collect();
    for c in &turn.calls {
        l.messages.push(json!({"role": "tool", "content": c.output}));
    }
    let text = tok.response_layout(Some(cfg.thinking == Thinking::On))?.render(&outputs);
    let ids = tok.encode(&text)?;
    if l.ep.tokens.len() + ids.len() >= cfg.max_total_tokens {
        l.ep.phase = Phase::Done(StopReason::ContextFull);
        return Ok(());
    }
    turn.response_tokens = ids.len();
    l.ep.tokens.extend_from_slice(&ids);
    l.ep.loss_mask.extend(std::iter::repeat_n(0u8, ids.len()));
    l.ep.logprobs.extend(std::iter::repeat_n(0.0, ids.len()));
    l.ep.phase = Phase::Generating;
    Ok(())
}

/// Efficiency over every call that ran, then the reward.
fn finish(l: &mut Live, reward: &RewardConfig) {
    let sets: Vec<_> = l.ep.turns.iter().flat_map(|t| t.calls.iter().map(|c| c.entities.clone())).collect();
    let e = efficiency(&sets);
    let answer = Answer::from_strings(l.ep.answer.iter().map(String::as_str));
    l.ep.score = Some(score(&answer, &l.gold, reward, e));
    l.ep.seconds = l.started.elapsed().as_secs_f64();
}

fn answer_strings(a: &Answer) -> Vec<String> {
    a.files.iter().chain(a.functions.iter()).cloned().collect()
}

/// The turn as a transformers-style assistant message (for teachers that
/// read messages): text outside tool-call blocks, plus the parsed calls.
pub(crate) fn assistant_message(text: &str, calls: &[Result<ToolCall, ToolCallError>]) -> Value {
    let content = match text.find("<tool_call>") {
        Some(i) => text[..i].trim_end().to_string(),
        None => text.to_string(),
    };
    let tool_calls: Vec<Value> = calls
        .iter()
        .filter_map(|c| c.as_ref().ok())
        .map(|c| json!({"type": "function", "function": {"name": c.name, "arguments": Value::Object(c.arguments.clone())}}))
        .collect();
    if tool_calls.is_empty() {
        json!({"role": "assistant", "content": content})
    } else {
        json!({"role": "assistant", "content": content, "tool_calls": tool_calls})
    }
}
