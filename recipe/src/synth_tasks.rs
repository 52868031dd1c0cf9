//! Synthetic tasks of a repository at a commit, without history or tests
//! (SERA-style; `rollout::synth`), as `fusegrpo tasks synth` and the
//! recipe's `tasks_from = "synth"` make them: functions drawn at random, an
//! issue written about each by the scripted writer or an OpenAI-compatible
//! teacher, gold = that function and its file; optionally the recall of a
//! localizer that sees only the issue.
//!
//! More tasks asked for than there are functions: all of them are taken
//! and the count is said. A function whose issue cannot be had (teacher
//! error, unusable text) is reported by repository, commit and function
//! and left out; the others are written, atomically. No task at all is an
//! error (and no file is written).

use trainer::run_config::PolicyChoice;
use anyhow::{bail, Context, Result};
use rollout::policy::Policy;
use rollout::repo::SnapshotStore;
use rollout::synth::http::HttpIssueWriter;
use rollout::synth::scripted::ScriptedIssueWriter;
use rollout::synth::summary::RecallSummary;
use rollout::synth::writer::IssueWriter;
use rollout::synth::{synthesize, SynthConfig, SynthReport, SynthTask};
use rollout::teacher::http::{HttpTeacher, HttpTeacherConfig};
use rollout::teacher::guided::{Guide, GuidedTeacher};
use rollout::teacher::scripted::ScriptedTeacher;
use rollout::tools::ToolRunner;
use std::path::Path;
use std::time::Duration;

/// How to reach an HTTP issue writer or localizer.
#[derive(Clone, Debug)]
pub struct HttpOpts {
    pub endpoint: trainer::episodes::Endpoint,
    /// Retries of a failed request (408, 429, 5xx, transport).
    pub max_retries: u32,
    /// Requests in flight at most.
    pub concurrency: usize,
    /// New tokens per issue (and per turn of an HTTP localizer) at most.
    pub max_tokens: usize,
}

impl Default for HttpOpts {
    fn default() -> Self {
        HttpOpts { endpoint: Default::default(), max_retries: 5, concurrency: 8, max_tokens: 512 }
    }
}

impl HttpOpts {
    pub fn config(&self, url: &str, seed: u64) -> HttpTeacherConfig {
        let mut c = self.endpoint.config(url);
        c.max_retries = self.max_retries;
        c.concurrency = self.concurrency;
        c.seed = Some(seed);
        c.max_tokens = Some(self.max_tokens);
        c.initial_backoff = Duration::from_millis(200);
        c
    }
}

/// Everything one synthesis run needs.
pub struct SynthRun<'a> {
    pub repos_dir: &'a Path,
    pub repo: &'a str,
    pub commit: &'a str,
    pub teacher: &'a PolicyChoice,
    /// `Some`: verify with this localizer.
    pub localizer: Option<&'a PolicyChoice>,
    pub http: &'a HttpOpts,
    pub config: SynthConfig,
}

/// Synthesize, report on stderr, write the kept tasks to `out` atomically.
pub fn make_tasks_to(job: &SynthRun<'_>, out: &Path) -> Result<SynthReport> {
    let report = make_tasks(job)?;
    write_tasks_atomic(out, &report.tasks)?;
    trainer::progress::say(&format!("{} tasks -> {}", report.tasks.len(), out.display()));
    Ok(report)
}

/// Synthesize and report on stderr; an error when no task was kept.
pub fn make_tasks(job: &SynthRun<'_>) -> Result<SynthReport> {
    anyhow::ensure!(job.config.count >= 1, "--count must be at least 1");
    let snapshot = SnapshotStore::open(job.repos_dir)
        .get(job.repo, job.commit)
        .with_context(|| format!("{} at {}", job.repo, job.commit))?;
    let writer = writer_of(job.teacher, job.http, job.config.seed)?;
    let mut localizer = job.localizer.map(|l| localizer_of(l, job.http, job.config.seed)).transpose()?;
    let report = synthesize(&snapshot, writer.as_ref(), localizer.as_mut().map(|l| l.as_mut() as &mut dyn Policy), &ToolRunner::default(), &job.config)?;
    print_report(&report, job);
    if report.tasks.is_empty() {
        let first = report.failures.first().map_or_else(String::new, |f| format!("; first failure: {f}"));
        bail!(
            "{} at {}: no task made ({} functions drawn, {} failed, {} below --min-recall){first}",
            job.repo,
            job.commit,
            report.drawn,
            report.failures.len(),
            report.below_min_recall
        );
    }
    Ok(report)
}

fn writer_of(teacher: &PolicyChoice, http: &HttpOpts, seed: u64) -> Result<Box<dyn IssueWriter>> {
    Ok(match teacher {
        PolicyChoice::Scripted => Box::new(ScriptedIssueWriter),
        PolicyChoice::Guided => bail!("--teacher: \"guided\" localizes but writes no issues: expected scripted or an http(s):// URL"),
        PolicyChoice::Http(url) => Box::new(HttpIssueWriter::new(http.config(url, seed), http.max_tokens).with_context(|| format!("teacher {url}"))?),
        PolicyChoice::Model => bail!("--teacher: expected scripted or an http(s):// URL (serve a model with `fusegrpo serve`)"),
    })
}

fn localizer_of(localizer: &PolicyChoice, http: &HttpOpts, seed: u64) -> Result<Box<dyn Policy>> {
    Ok(match localizer {
        PolicyChoice::Scripted => Box::new(ScriptedTeacher::default()),
        PolicyChoice::Guided => Box::new(GuidedTeacher::new(ScriptedTeacher::default(), Guide::default())),
        PolicyChoice::Http(url) => Box::new(HttpTeacher::new(http.config(url, seed)).with_context(|| format!("localizer {url}"))?),
        PolicyChoice::Model => bail!("--localizer: expected scripted or an http(s):// URL (serve a model with `fusegrpo serve`)"),
    })
}

/// Each failure, then one line of counts, and the recall line when verified.
fn print_report(report: &SynthReport, job: &SynthRun<'_>) {
    for f in &report.failures {
        trainer::progress::say(&format!("synth: failed: {f}"));
    }
    if report.drawn < job.config.count {
        trainer::progress::say(&format!(
            "synth: {} at {}: {} tasks asked for, only {} functions qualify: all of them were taken",
            job.repo, job.commit, job.config.count, report.candidates
        ));
    }
    trainer::progress::say(&format!(
        "synth: {} of {} candidate functions drawn, {} tasks kept, {} failed, {} below min recall",
        report.drawn,
        report.candidates,
        report.tasks.len(),
        report.failures.len(),
        report.below_min_recall
    ));
    if job.localizer.is_some() {
        trainer::progress::say(&format!("synth: {}", RecallSummary::of(&report.tasks).line()));
    }
}

/// The run's counts as one JSON object (stdout of `tasks synth`).
pub fn summary_json(report: &SynthReport, requested: usize) -> serde_json::Value {
    serde_json::json!({
        "requested": requested,
        "candidates": report.candidates,
        "drawn": report.drawn,
        "tasks": report.tasks.len(),
        "failed": report.failures.len(),
        "failures": report.failures,
        "below_min_recall": report.below_min_recall,
        "recall": RecallSummary::of(&report.tasks),
    })
}

/// Task lines to `path` through `path.partial` and a rename (folders created).
pub fn write_tasks_atomic(path: &Path, tasks: &[SynthTask]) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    Ok(trainer::files::write_json_lines(path, tasks)?)
}
