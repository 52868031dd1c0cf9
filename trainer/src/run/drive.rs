//! The one loop that drives a training stage, GRPO's or SFT's: a step, its
//! metrics line, the progress bar (outside a terminal, a log line per step), the stop after too many non-finite steps
//! in a row, checkpoints at the save cadence (and at the end, and on
//! SIGINT/SIGTERM), and with several ranks each rank's log line.

use super::{Run, RunEnd};
use crate::interrupt;
use crate::checkpoint;
use crate::dist;
use crate::error::Result;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

/// A stage's steps as [`drive`] runs them.
pub trait Steps {
    /// The metrics line of a step (`<run>/metrics.jsonl`).
    type Metrics: serde::Serialize;

    /// Steps done so far.
    fn done(&self) -> u64;

    /// Runs the next step, the last when `last`; none when the data has
    /// run out first.
    fn step(&mut self, last: bool) -> Result<Option<Step<Self::Metrics>>>;

    /// Saves a checkpoint of the state after the last step.
    fn save(&self, run: &Run) -> Result<PathBuf>;
}

/// What one step did.
pub struct Step<M> {
    pub metrics: M,
    /// The update was skipped (a NaN/inf loss or gradient).
    pub skipped: bool,
    /// The progress bar's message.
    pub message: String,
    /// This rank's share of the step's data, for its log line
    /// (`{"tasks": [..], "episodes": n}` or `{"rows": [..]}`).
    pub share: serde_json::Map<String, serde_json::Value>,
}

/// How long a stage runs and how often it saves.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Stop after this many steps in total.
    pub total: u64,
    /// Save every this many steps (and after the last).
    pub save_every: u64,
    /// Stop (saving first) after this many skipped steps in a row.
    pub max_nonfinite: u32,
    /// The progress bar's unit (`steps`, `sft steps`).
    pub unit: &'static str,
}

/// Runs `steps` in `run` until `schedule.total` steps are done (or the
/// data runs out), and returns the newest checkpoint; on SIGINT/SIGTERM it
/// saves after the step in progress and returns that checkpoint as
/// [`RunEnd::Interrupted`].
pub fn drive<S: Steps>(run: &Run, steps: &mut S, schedule: &Schedule) -> Result<RunEnd> {
    let dist = dist::current();
    let mut metrics = run.metrics(steps.done())?;
    let mut rank_log = run.rank_log(steps.done())?;
    let stop = interrupt::flag()?;
    let save_every = schedule.save_every.max(1);
    let bar = crate::episodes::progress_bar(schedule.total, schedule.unit);
    if dist.rank() > 0 {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar.set_position(steps.done());
    // Outside a terminal the bar draws nothing: a log line per step says
    // what it would show (a job under nohup or in CI is not silent).
    let lines = dist.rank() == 0 && bar.is_hidden();
    let started = std::time::Instant::now();
    let mut nonfinite_in_a_row = 0;
    while steps.done() < schedule.total {
        let last = steps.done() + 1 == schedule.total;
        let Some(step) = steps.step(last)? else { break };
        metrics.write(&step.metrics)?;
        bar.set_position(steps.done());
        if lines {
            let (done, total, secs) = (steps.done(), schedule.total, started.elapsed().as_secs_f64());
            tracing::info!("{} {done}/{total}: {} ({secs:.1} s)", schedule.unit, step.message);
        }
        bar.set_message(step.message);
        nonfinite_in_a_row = if step.skipped { nonfinite_in_a_row + 1 } else { 0 };
        if nonfinite_in_a_row >= schedule.max_nonfinite.max(1) {
            let dir = steps.save(run)?;
            crate::error::bail!(
                "{nonfinite_in_a_row} steps in a row had a NaN/inf loss or gradient (train.max_nonfinite_steps); saved {} and stopped",
                dir.display()
            );
        }
        let interrupted = dist::any(&*dist, stop.load(Ordering::SeqCst))?;
        let mut saved = None;
        if steps.done().is_multiple_of(save_every) || steps.done() == schedule.total || interrupted {
            let dir = steps.save(run)?;
            if lines {
                tracing::info!("saved {}", dir.display());
            } else {
                bar.println(format!("saved {}", dir.display()));
            }
            saved = Some(dir);
        }
        if let Some(log) = &mut rank_log {
            let mut line = serde_json::Map::new();
            line.insert("step".into(), steps.done().into());
            line.insert("rank".into(), dist.rank().into());
            line.insert("ranks".into(), dist.world().into());
            line.insert("pid".into(), std::process::id().into());
            line.extend(step.share);
            line.insert("params_hash".into(), run.take_saved_hash().into());
            log.write(&line)?;
        }
        if let (true, Some(dir)) = (interrupted, saved) {
            bar.abandon();
            return Ok(RunEnd::Interrupted(dir));
        }
    }
    bar.finish();
    let last = match checkpoint::latest(&run.dir)? {
        Some(dir) => dir,
        None => steps.save(run)?,
    };
    Ok(RunEnd::Done(last))
}
