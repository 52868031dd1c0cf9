//! A run's metrics.jsonl and the ranks' logs: one JSON line per step
//! (and, when asked, its scalars to TensorBoard event files).

use crate::error::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A run's metrics.jsonl (or a rank's log): one JSON line per step, flushed
/// as written; a file of `None` writes nothing. The lines of steps after
/// the run's starting step (steps that will be redone) are dropped at the
/// first write, not before: a run that fails at start-up leaves the file
/// as it was.
pub struct MetricsFile {
    file: Option<std::fs::File>,
    path: PathBuf,
    /// The starting step, until the first write has truncated the file.
    pending: Option<u64>,
    /// The TensorBoard folder, then its event file once the first write opened it.
    tensorboard: Option<Events>,
    /// Per-task scalars (`tasks/<id>`) go to TensorBoard too.
    tensorboard_tasks: bool,
}

/// Where a [`MetricsFile`]'s scalars also go.
enum Events {
    /// This folder, from the first write on.
    Dir(PathBuf),
    Open(super::tensorboard::EventWriter),
}

impl MetricsFile {
    /// `path` for appending from step `step` on.
    pub(super) fn append(path: &Path, step: u64) -> Result<MetricsFile> {
        Ok(MetricsFile { file: None, path: path.to_path_buf(), pending: Some(step), tensorboard: None, tensorboard_tasks: false })
    }

    /// Also every scalar of each line, per step, to a new TensorBoard event
    /// file in `dir` ([`super::tensorboard`]); the folder's earlier event
    /// files are cut back to the starting step at the first write. The
    /// per-task scalars (`tasks/<id>`) only with `tasks`.
    pub(super) fn with_tensorboard(mut self, dir: Option<PathBuf>, tasks: bool) -> MetricsFile {
        self.tensorboard = dir.map(Events::Dir);
        self.tensorboard_tasks = tasks;
        self
    }

    /// A file that writes nothing (ranks other than 0).
    pub(super) fn none(path: PathBuf) -> MetricsFile {
        MetricsFile { file: None, path, pending: None, tensorboard: None, tensorboard_tasks: false }
    }

    pub fn write<T: serde::Serialize>(&mut self, row: &T) -> Result<()> {
        if let Some(step) = self.pending.take() {
            truncate_metrics(&self.path, step)?;
            let file = std::fs::OpenOptions::new().create(true).append(true).open(&self.path).with_context(|| format!("opening {}", self.path.display()))?;
            self.file = Some(file);
            if let Some(Events::Dir(dir)) = &self.tensorboard {
                let writer = super::tensorboard::EventWriter::create(dir, step).with_context(|| format!("TensorBoard event file in {}", dir.display()))?;
                self.tensorboard = Some(Events::Open(writer));
            }
        }
        let Some(file) = &mut self.file else { return Ok(()) };
        writeln!(file, "{}", serde_json::to_string(row)?).and_then(|_| file.flush()).with_context(|| format!("writing {}", self.path.display()))?;
        if let Some(Events::Open(events)) = &mut self.tensorboard {
            let row = serde_json::to_value(row)?;
            let step = row["step"].as_u64().with_context(|| format!("a metrics line of {} without its step", self.path.display()))?;
            let mut scalars = super::tensorboard::scalars(&row);
            if !self.tensorboard_tasks {
                scalars.retain(|(tag, _)| !tag.starts_with("tasks/"));
            }
            events.write(step, scalars).with_context(|| format!("writing {}", events.path().display()))?;
        }
        Ok(())
    }
}

/// Keep only the metrics lines of steps `1..=step` (atomically).
pub fn truncate_metrics(path: &Path, step: u64) -> Result<()> {
    if !path.exists() {
        return Ok(());
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let kept: String = text
        .lines()
        .filter(|l| serde_json::from_str::<serde_json::Value>(l).ok().and_then(|v| v["step"].as_u64()).is_some_and(|s| s <= step))
        .map(|l| format!("{l}\n"))
        .collect();
    if kept == text {
        return Ok(());
    }
    crate::files::write_atomic(path, kept.as_bytes())
}
