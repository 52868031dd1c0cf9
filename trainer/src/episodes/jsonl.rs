//! Episode files: written atomically with their derived fields spelled out,
//! read back with errors that name the line, and rolled out resumably in
//! chunks (the recipe's long evaluations survive an interruption).

use super::{on_done, progress_bar, with_policy, TeacherOpts};
use crate::files::write_json_lines;
use crate::run_config::{PolicyChoice, RunConfig};
use crate::error::{Context, Result};
use rollout::episode::driver::run_episodes_keyed;
use rollout::episode::Episode;
use rollout::tasks::Task;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// [`write_episodes`] to `path` with its folders created. Atomic (through
/// `path.partial`): a stage's output never exists half-written, so "the
/// file exists" means "the stage finished".
pub fn write_episodes_atomic(path: &Path, episodes: &[Episode]) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    write_episodes(path, episodes)
}

/// Episodes as JSONL (atomically, [`write_json_lines`]), with their stop reason, policy tokens, tool calls
/// and mean calls per tool turn spelled out.
pub fn write_episodes(path: &Path, episodes: &[Episode]) -> Result<()> {
    let rows: Vec<serde_json::Value> = episodes.iter().map(episode_row).collect();
    write_json_lines(path, &rows)
}

/// One episode's output line: the episode with its stop reason, policy
/// tokens, tool calls and mean calls per tool turn spelled out.
pub fn episode_row(e: &Episode) -> serde_json::Value {
    let mut v = serde_json::to_value(e).expect("episodes serialize");
    v["stop_reason"] = serde_json::to_value(e.stop_reason()).expect("serializes");
    v["policy_tokens"] = e.policy_tokens().into();
    v["tool_calls"] = e.tool_calls().into();
    v["calls_per_turn"] = rollout::episode::filter::calls_per_turn(e).into();
    v
}

/// What made an episode file's episodes, written into each row of `eval
/// --out` and `rollout --out` as `made_by` and checked by `eval --reuse`:
/// the policy, the model and adapter (paths as resolved), the group, and
/// a hash of each config section that changes episodes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MadeBy {
    /// `model`, `scripted` or the teacher's URL.
    pub policy: String,
    pub model: String,
    #[serde(default)]
    pub adapter: Option<String>,
    /// Episodes per task.
    pub group: usize,
    /// Section name -> hash of its settings ([`MadeBy::new`] lists them).
    pub settings: std::collections::BTreeMap<String, String>,
}

impl MadeBy {
    /// What `policy` with `cfg` makes, `group` episodes per task. The
    /// sections: `[episode]`, `[sampling]`, `[env.tools]`, `[reward]`,
    /// `[rollout] engine` and `[model]` apart from its path and adapter
    /// (tokenizer, chat template, dtype, device).
    pub fn new(cfg: &RunConfig, policy: &PolicyChoice, group: usize) -> MadeBy {
        let name = String::from(policy.clone());
        let identity = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()).display().to_string();
        let mut model = cfg.model.clone();
        model.path = String::new();
        model.adapter = None;
        let hash = |v: serde_json::Value| crate::checkpoint::config_hash(&v);
        let settings = [
            ("episode", json(&cfg.episode)),
            ("sampling", json(&cfg.sampling)),
            ("env.tools", json(&cfg.env.tools)),
            ("reward", json(&cfg.reward)),
            ("rollout.engine", json(&cfg.rollout.engine)),
            ("model (apart from path and adapter)", json(&model)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), hash(v)))
        .collect();
        MadeBy {
            policy: name,
            model: identity(Path::new(&cfg.model.path)),
            adapter: cfg.model.adapter.as_deref().map(identity),
            group,
            settings,
        }
    }

    /// The first way `self` (the file's) differs from `want` (this run's), in words.
    pub fn mismatch(&self, want: &MadeBy) -> Option<String> {
        if self.policy != want.policy {
            return Some(format!("they are episodes of the policy `{}`, not `{}`", self.policy, want.policy));
        }
        if self.model != want.model {
            return Some(format!("they are episodes of the model {}, not {}", self.model, want.model));
        }
        if self.adapter != want.adapter {
            let name = |a: &Option<String>| a.clone().unwrap_or_else(|| "none".into());
            return Some(format!("they are episodes with the adapter {}, not {}", name(&self.adapter), name(&want.adapter)));
        }
        if self.group != want.group {
            return Some(format!("they are {} episodes per task (group), not {}", self.group, want.group));
        }
        for (section, hash) in &want.settings {
            if self.settings.get(section) != Some(hash) {
                return Some(format!("they were made with other config settings: [{section}] differs"));
            }
        }
        None
    }
}

/// A config section as JSON.
fn json<T: serde::Serialize>(section: &T) -> serde_json::Value {
    serde_json::to_value(section).expect("config sections serialize")
}

/// [`write_episodes_atomic`] with `made_by` in each row.
pub fn write_episodes_made_by(path: &Path, episodes: &[Episode], made_by: &MadeBy) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let made_by = serde_json::to_value(made_by)?;
    let rows: Vec<serde_json::Value> = episodes
        .iter()
        .map(|e| {
            let mut row = episode_row(e);
            row["made_by"] = made_by.clone();
            row
        })
        .collect();
    write_json_lines(path, &rows)
}

/// The `made_by` of each episode row of `path` (in [`read`]'s order):
/// `None` for a row written without one (before issue 66).
pub fn read_made_by(path: &Path) -> Result<Vec<Option<MadeBy>>> {
    #[derive(serde::Deserialize)]
    struct Row {
        #[serde(default)]
        made_by: Option<MadeBy>,
    }
    let mut out = Vec::new();
    each_line(path, |n, line| {
        let row: Row = serde_json::from_str(line).map_err(|e| crate::error::format_err!("{}:{n}: made_by: {e}", path.display()))?;
        out.push(row.made_by);
        Ok(())
    })?;
    Ok(out)
}

/// Calls `f(number, line)` for each non-blank line of the JSONL file
/// `path` (numbers from 1); a read error names the file and line.
pub fn each_line(path: &Path, mut f: impl FnMut(usize, &str) -> Result<()>) -> Result<()> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("{}:{}: reading", path.display(), n + 1))?;
        if !line.trim().is_empty() {
            f(n + 1, &line)?;
        }
    }
    Ok(())
}

/// Episodes of `policy` on `tasks` (`group` each) into `out`, resumable:
/// `chunk` tasks at a time (which also bounds the rollout's memory), each
/// chunk appended to `<out>.chunks` as it ends. A rerun reads the partial
/// file's whole chunks back (a torn last line is dropped), checks they are
/// these tasks', and continues after them; `out` appears (renamed) when all
/// are done, and is read back when it exists. A first interrupt stops after
/// the chunk in progress (exit 130, nothing lost).
///
/// With several ranks ([`crate::dist::current`], `mpirun`), each chunk's
/// tasks are shared among them ([`crate::dist::share`]), each rank's
/// episodes keyed as in the whole chunk ([`run_episodes_keyed`]), so the
/// scripted teacher and a sampling model play the episodes one process
/// would; the chunk is gathered in rank order (task order) and rank 0
/// alone writes the files. Every rank returns every episode.
pub fn run_policy_resumable(
    cfg: &RunConfig,
    tasks: &[Task],
    policy: &PolicyChoice,
    group: usize,
    teacher: &TeacherOpts,
    chunk: usize,
    out: &Path,
) -> Result<Vec<Episode>> {
    let dist = crate::dist::current();
    let writer = dist.rank() == 0;
    if out.exists() {
        return read(out);
    }
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let partial = PathBuf::from(format!("{}.chunks", out.display()));
    let chunk = chunk.max(1);
    // Rank 0 drops a torn tail first; the others then read what it kept.
    let mut done = if writer { read_whole_chunks(&partial, tasks, group, chunk)? } else { Vec::new() };
    dist.barrier()?;
    if !writer {
        done = read_whole_chunks(&partial, tasks, group, chunk)?;
    }
    if !done.is_empty() && writer {
        crate::progress::say(&format!("{}: {} of {} episodes done before, continuing", partial.display(), done.len(), tasks.len() * group));
    }
    let stop = crate::interrupt::flag()?;
    with_policy(cfg, policy, teacher, |policy, env| {
        let bar = if writer { progress_bar((tasks.len() * group) as u64, "episodes") } else { indicatif::ProgressBar::hidden() };
        bar.set_position(done.len() as u64);
        // One progress closure for every chunk: its mean and ETA are this run's.
        let mut progress = on_done(&bar);
        for piece in tasks[done.len() / group..].chunks(chunk) {
            let mine = crate::dist::share(&*dist, piece.len());
            let first = (mine.start * group) as u64;
            let before = policy.draws();
            let local = run_episodes_keyed(policy, env, &piece[mine], group, &cfg.episode, first, &mut progress)?;
            let mine = policy.draws() - before;
            keep_draws_in_step(&*dist, policy, mine)?;
            let episodes = crate::dist::gather_concat(&*dist, local)?;
            if writer {
                append_chunk(&partial, &episodes)?;
            }
            done.extend(episodes);
            let stopping = crate::dist::any(&*dist, stop.load(std::sync::atomic::Ordering::SeqCst))?;
            if stopping && done.len() < tasks.len() * group {
                bar.abandon();
                return Err(crate::error::Error::from(crate::interrupt::Interrupted(format!(
                    "interrupted: {} of {} episodes kept in {}; run the same command again to continue",
                    done.len(),
                    tasks.len() * group,
                    partial.display()
                ))));
            }
        }
        bar.finish_and_clear();
        Ok(())
    })?;
    if writer {
        write_episodes_atomic(out, &done)?;
        std::fs::remove_file(&partial).with_context(|| format!("removing {}", partial.display()))?;
    }
    dist.barrier()?;
    Ok(done)
}

/// After a chunk, every rank's policy as far along its random stream as
/// the rank that drew the most seeds (`mine` this rank's draws): one
/// process decodes the chunk in as many rounds as the rank with the
/// longest episodes, one seed a round, so the next chunk starts from the
/// same seed on every rank as in one process. (Exact when the chunk's
/// episodes all run at once: `chunk_tasks` x group within
/// `[rollout] max_live_episodes`.)
fn keep_draws_in_step(dist: &dyn crate::dist::Collective, policy: &mut dyn rollout::policy::Policy, mine: u64) -> Result<()> {
    if dist.world() == 1 {
        return Ok(());
    }
    let most = dist.all_gather_f64(&[mine as f64])?.into_iter().fold(0.0, f64::max) as u64;
    policy.skip_draws(most - mine);
    Ok(())
}

/// One chunk's episodes appended to the partial file and synced.
fn append_chunk(partial: &Path, episodes: &[Episode]) -> Result<()> {
    let mut text = String::new();
    for e in episodes {
        text += &serde_json::to_string(&episode_row(e))?;
        text.push('\n');
    }
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(partial).with_context(|| format!("opening {}", partial.display()))?;
    std::io::Write::write_all(&mut file, text.as_bytes()).with_context(|| format!("appending to {}", partial.display()))?;
    file.sync_data().with_context(|| format!("syncing {}", partial.display()))
}

/// Why `line` is not an episode, naming the field where that can be told:
/// not JSON at all (NaN and Infinity are not JSON numbers), a score number
/// that is null or missing, a field missing, or serde's reason with the key
/// before the position it stopped at.
fn why_not_an_episode(line: &str, err: &serde_json::Error) -> String {
    const WHAT: &str = "not an episode line (fusegrpo synth/rollout output)";
    let value: serde_json::Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) if ["NaN", "Infinity"].iter().any(|w| line.contains(w)) => {
            return format!("{WHAT}: not JSON ({e}): NaN and Infinity are not JSON numbers, and every score must be a finite number")
        }
        Err(e) => return format!("{WHAT}: not JSON ({e})"),
    };
    let score = &value["score"];
    if score.is_object() {
        for field in ["f1_file", "f1_func", "f1", "e", "reward"] {
            if !score[field].is_number() {
                let got = if score[field].is_null() && score.get(field).is_none() { "missing".to_string() } else { score[field].to_string() };
                return format!("{WHAT}: score.{field} is {got}: expected a finite number");
            }
        }
    }
    if let Some(map) = value.as_object() {
        let required = ["task_id", "sample", "tokens", "loss_mask", "logprobs", "prompt_tokens", "turns", "phase", "answer", "seconds"];
        if let Some(field) = required.iter().find(|k| !map.contains_key(**k)) {
            return format!("{WHAT}: field `{field}` is missing");
        }
    }
    match key_before(line, err.column()) {
        Some(key) => format!("{WHAT}: at `{key}`: {err}"),
        None => format!("{WHAT}: {err}"),
    }
}

/// The last `"key":` of `line` that starts before 1-based `column`.
fn key_before(line: &str, column: usize) -> Option<&str> {
    let head = line.get(..column.min(line.len()))?;
    let colon = head.rfind("\":")?;
    let open = head[..colon].rfind('"')?;
    Some(&head[open + 1..colon])
}

/// The whole chunks of a partial episode file (see [`run_policy_resumable`]),
/// rewritten without what follows them; empty when there is no file.
fn read_whole_chunks(partial: &Path, tasks: &[Task], group: usize, chunk: usize) -> Result<Vec<Episode>> {
    let Ok(text) = std::fs::read_to_string(partial) else { return Ok(Vec::new()) };
    let mut episodes: Vec<Episode> = Vec::new();
    let lines = text.lines().filter(|l| !l.trim().is_empty()).count();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Episode>(line) {
            Ok(e) => episodes.push(e),
            Err(_) => break,
        }
    }
    let per_chunk = chunk * group;
    let whole = (episodes.len() / per_chunk * per_chunk).min(tasks.len() * group);
    let whole = if episodes.len() >= tasks.len() * group { tasks.len() * group } else { whole };
    episodes.truncate(whole);
    for (i, e) in episodes.iter().enumerate() {
        let task = &tasks[i / group];
        crate::error::ensure!(
            e.task_id == task.instance_id,
            "{}: episode {} is of task '{}' but the tasks now give '{}' there: the task list changed since it was written; remove the file to start over",
            partial.display(),
            i + 1,
            e.task_id,
            task.instance_id
        );
    }
    if whole < lines {
        let kept: Vec<serde_json::Value> = episodes.iter().map(episode_row).collect();
        write_json_lines(partial, &kept)?;
    }
    Ok(episodes)
}

/// Episodes from a JSONL file; errors name the file and line.
pub fn read(path: &Path) -> Result<Vec<Episode>> {
    let mut out = Vec::new();
    each_line(path, |n, line| {
        let e: Episode = serde_json::from_str(line).map_err(|err| crate::error::format_err!("{}:{n}: {}", path.display(), why_not_an_episode(line, &err)))?;
        if let Some((field, value, range)) = e.score.as_ref().and_then(|s| s.out_of_range()) {
            // As JSON writes it (1e300, not 300 digits).
            crate::error::bail!("{}:{n}: score.{field} is {}: expected {range}", path.display(), serde_json::json!(value));
        }
        crate::error::ensure!(
            e.tokens.len() == e.loss_mask.len(),
            "{}:{n}: {} tokens but {} loss-mask entries",
            path.display(),
            e.tokens.len(),
            e.loss_mask.len()
        );
        out.push(e);
        Ok(())
    })?;
    Ok(out)
}

/// [`read`], refusing a repeated (task_id, sample) pair (a file
/// concatenated twice, a row repeated): means over such a file would count
/// the pair twice. The error names the line and the first one.
pub fn read_unique(path: &Path) -> Result<Vec<Episode>> {
    let episodes = read(path)?;
    // Line numbers of the non-empty lines, as `read` skips the empty ones.
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let lines: Vec<usize> = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()).map(|(n, _)| n + 1).collect();
    let mut first: std::collections::HashMap<(&str, usize), usize> = std::collections::HashMap::new();
    for (i, e) in episodes.iter().enumerate() {
        if let Some(before) = first.insert((e.task_id.as_str(), e.sample), lines[i]) {
            crate::error::bail!(
                "{}:{}: task '{}' sample {} again (first at line {before}): each (task_id, sample) pair must appear once; remove the repeated rows",
                path.display(),
                lines[i],
                e.task_id,
                e.sample
            );
        }
    }
    Ok(episodes)
}
