//! Synthetic tasks without history or tests (SERA-style): functions drawn
//! at random from a tree ([`pick`]), an issue text written about each by a
//! teacher that sees the function's code, its path and one vague
//! instruction ([`instructions`]; [`scripted::ScriptedIssueWriter`] or
//! [`http::HttpIssueWriter`]), gold = that function and its file. With a
//! localizer, [`verify`] runs a second rollout that sees only the issue
//! and keeps the recall of the gold function among its answer.
//!
//! Tasks are ordinary task lines with an extra `synth` field
//! (`{instruction, writer, recall?, file_recall?}`) that the task loader
//! ignores. A function whose issue cannot be had (the teacher failed, or
//! its text is unusable: [`writer::check_issue`]) is a
//! [`SynthFailure`] naming the repository, commit and function; the other
//! tasks are kept.

pub mod http;
pub mod instructions;
pub mod pick;
pub mod scripted;
pub mod summary;
pub mod verify;
pub mod writer;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};

use crate::policy::Policy;
use crate::repo::Snapshot;
use crate::reward::Gold;
use crate::tasks::Task;
use crate::tools::ToolRunner;
use pick::{Candidate, PickConfig};
use verify::VerifyConfig;
use writer::{check_issue, IssueRequest, IssueWriter};

/// What to synthesize.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthConfig {
    /// Tasks asked for (all candidates when there are fewer).
    pub count: usize,
    /// Seed of the draw, the instructions and the phrasing.
    pub seed: u64,
    /// What counts as a real function.
    pub pick: PickConfig,
    /// Lines of code shown to the writer at most.
    pub max_code_lines: usize,
    /// Verifying rollouts' limits (used when a localizer is given).
    pub verify: VerifyConfig,
    /// Tasks whose verified recall is below this are dropped (0: keep all;
    /// a task whose verification failed has no recall and is dropped when
    /// this is above 0).
    pub min_recall: f64,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig { count: 50, seed: 0, pick: PickConfig::default(), max_code_lines: 120, verify: VerifyConfig::default(), min_recall: 0.0 }
    }
}

/// The `synth` field of a synthetic task line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SynthInfo {
    /// The instruction the issue was written around.
    pub instruction: String,
    /// Who wrote the issue (`scripted`, `http:<url>`).
    pub writer: String,
    /// Verified recall of the gold function (with a localizer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recall: Option<f64>,
    /// Verified recall of the gold file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_recall: Option<f64>,
}

/// A task line with its `synth` field.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SynthTask {
    #[serde(flatten)]
    pub task: Task,
    pub synth: SynthInfo,
}

/// Where a function's task failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SynthStage {
    /// Writing the issue (teacher error or unusable text): no task.
    Write,
    /// The verifying rollout: the task is kept without a recall.
    Verify,
}

/// One function that did not give a (verified) task.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SynthFailure {
    /// `owner/name`.
    pub repo: String,
    /// The full commit id.
    pub commit: String,
    /// The function entity, `path:name`.
    pub function: String,
    pub stage: SynthStage,
    /// The cause.
    pub message: String,
}

impl std::fmt::Display for SynthFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let stage = match self.stage {
            SynthStage::Write => "writing the issue",
            SynthStage::Verify => "verifying",
        };
        write!(f, "{} at {} {}: {stage}: {}", self.repo, short(&self.commit), self.function, self.message)
    }
}

/// What a synthesis run made.
#[derive(Clone, Debug, Default)]
pub struct SynthReport {
    /// The tasks kept, in draw order.
    pub tasks: Vec<SynthTask>,
    /// Candidate functions in the tree.
    pub candidates: usize,
    /// Functions drawn (`min(count, candidates)`).
    pub drawn: usize,
    /// Failures, in draw order.
    pub failures: Vec<SynthFailure>,
    /// Tasks dropped by `min_recall`.
    pub below_min_recall: usize,
}

/// Why nothing could be synthesized.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    /// No function passes the pick rules.
    #[error("{repo} at {commit}: no function to make a task of ({files} files, {parsed} in a language we parse; tests, generated code and functions under {min_lines} lines are skipped)")]
    NoFunctions { repo: String, commit: String, files: usize, parsed: usize, min_lines: usize },
    /// `count` is 0.
    #[error("count must be at least 1")]
    ZeroCount,
}

/// Draws `config.count` functions of `snapshot`, writes an issue for each
/// with `writer`, and (with a `localizer`) verifies each task.
pub fn synthesize(
    snapshot: &Arc<Snapshot>,
    writer: &dyn IssueWriter,
    localizer: Option<&mut dyn Policy>,
    tools: &ToolRunner,
    config: &SynthConfig,
) -> Result<SynthReport, SynthError> {
    if config.count == 0 {
        return Err(SynthError::ZeroCount);
    }
    let all = pick::candidates(snapshot, &config.pick);
    if all.is_empty() {
        let parsed = snapshot.files().iter().filter(|f| f.spans().is_some()).count();
        return Err(SynthError::NoFunctions {
            repo: snapshot.repo().into(),
            commit: snapshot.commit().into(),
            files: snapshot.files().len(),
            parsed,
            min_lines: config.pick.min_lines,
        });
    }
    let mut rng = pick::rng(config.seed);
    let drawn = pick::draw(&all, config.count, &mut rng);
    let jobs: Vec<Job> = drawn
        .into_iter()
        .map(|c| Job { code: code_of(snapshot, &c, config.max_code_lines), instruction: instructions::INSTRUCTIONS[rng.random_range(0..instructions::INSTRUCTIONS.len())], seed: rng.next_u64(), candidate: c })
        .collect();
    let mut report = SynthReport { candidates: all.len(), drawn: jobs.len(), ..Default::default() };
    let written = parallel_map(&jobs, writer.concurrency(), |job| write_one(snapshot, writer, job));
    for (job, result) in jobs.iter().zip(written) {
        match result {
            Ok(task) => report.tasks.push(task),
            Err(message) => report.failures.push(failure(snapshot, &job.candidate, SynthStage::Write, message)),
        }
    }
    if let Some(localizer) = localizer {
        verify_all(snapshot, localizer, tools, config, &mut report);
    }
    Ok(report)
}

/// One drawn function and what its writer gets.
struct Job {
    candidate: Candidate,
    code: String,
    instruction: &'static str,
    seed: u64,
}

fn write_one(snapshot: &Snapshot, writer: &dyn IssueWriter, job: &Job) -> Result<SynthTask, String> {
    let c = &job.candidate;
    let request = IssueRequest {
        repo: snapshot.repo(),
        commit: snapshot.commit(),
        path: &c.path,
        function: &c.name,
        code: &job.code,
        instruction: job.instruction,
        seed: job.seed,
    };
    let text = check_issue(&writer.write(&request)?, &c.path)?;
    let gold = Gold::from_strings([c.entity().as_str()]);
    let task = Task {
        instance_id: instance_id(snapshot.repo(), snapshot.commit(), &c.entity()),
        repo: snapshot.repo().into(),
        base_commit: snapshot.commit().into(),
        problem_statement: text,
        patch: None,
        gold: Some(gold),
    };
    Ok(SynthTask { task, synth: SynthInfo { instruction: job.instruction.into(), writer: writer.name(), recall: None, file_recall: None } })
}

/// Verify every task, record recalls and failures, then apply `min_recall`.
fn verify_all(snapshot: &Arc<Snapshot>, localizer: &mut dyn Policy, tools: &ToolRunner, config: &SynthConfig, report: &mut SynthReport) {
    let items: Vec<(String, Gold)> =
        report.tasks.iter().map(|t| (t.task.problem_statement.clone(), t.task.gold.clone().unwrap_or_default())).collect();
    let results = verify::verify(localizer, snapshot, tools, &items, &config.verify);
    for (task, result) in report.tasks.iter_mut().zip(results) {
        match result {
            Ok(r) => {
                task.synth.recall = Some(r.functions);
                task.synth.file_recall = Some(r.files);
            }
            Err(message) => {
                let function = task.task.gold.as_ref().and_then(|g| g.functions.iter().next().cloned()).unwrap_or_default();
                report.failures.push(SynthFailure {
                    repo: snapshot.repo().into(),
                    commit: snapshot.commit().into(),
                    function,
                    stage: SynthStage::Verify,
                    message,
                });
            }
        }
    }
    if config.min_recall > 0.0 {
        let before = report.tasks.len();
        report.tasks.retain(|t| t.synth.recall.is_some_and(|r| r >= config.min_recall));
        report.below_min_recall = before - report.tasks.len();
    }
}

fn failure(snapshot: &Snapshot, c: &Candidate, stage: SynthStage, message: String) -> SynthFailure {
    SynthFailure { repo: snapshot.repo().into(), commit: snapshot.commit().into(), function: c.entity(), stage, message }
}

/// The function's lines, with up to 8 comment lines just above it, at most `max_lines`.
fn code_of(snapshot: &Snapshot, c: &Candidate, max_lines: usize) -> String {
    let text = snapshot.file(&c.path).and_then(|f| f.text()).map(String::from_utf8_lossy).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let mut start = c.start_line.saturating_sub(1);
    let is_comment = |l: &str| {
        let t = l.trim_start();
        ["//", "#", "/*", "*"].iter().any(|p| t.starts_with(p)) && !t.starts_with("#[") && !t.starts_with("#!")
    };
    while start > 0 && c.start_line - start <= 8 && lines.get(start - 1).is_some_and(|l| is_comment(l)) {
        start -= 1;
    }
    let end = c.end_line.min(lines.len()).min(start + max_lines);
    lines.get(start..end).unwrap_or(&[]).join("\n")
}

/// `owner__name-synth-<commit 8>-<hash 8 of the entity>`: stable per function and commit.
fn instance_id(repo: &str, commit: &str, entity: &str) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    for b in entity.bytes() {
        hash = (hash ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    format!("{}-synth-{}-{hash:08x}", repo.replace('/', "__"), short(commit))
}

fn short(commit: &str) -> &str {
    &commit[..commit.len().min(8)]
}

/// `f` over `items` on `workers` threads; results in item order.
fn parallel_map<T: Sync, R: Send>(items: &[T], workers: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..workers.clamp(1, items.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let r = f(item);
                results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
            });
        }
    });
    results.into_inner().unwrap_or_else(|e| e.into_inner()).into_iter().map(|r| r.expect("every item ran")).collect()
}

#[cfg(test)]
mod tests;
