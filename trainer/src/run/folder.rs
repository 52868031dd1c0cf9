//! What a run folder holds before a run starts in it, and the refusal of a
//! start that would overwrite an earlier run (`--overwrite` to allow it).

use super::RunOptions;
use crate::checkpoint;
use crate::dist;
use crate::error::{Context, Result};
use std::path::{Path, PathBuf};

/// What a run folder holds before a run starts in it.
struct Folder {
    /// The checkpoint `--resume` names (none for a fresh run).
    resume: Option<PathBuf>,
    /// The step the run starts from.
    start: u64,
    /// Step folders after `start`: another run's, or this one's future.
    newer: Vec<(u64, PathBuf)>,
    /// metrics.jsonl lines of the folder a fresh run (no `--resume`) would
    /// start in. With `--resume auto` and no checkpoint yet, the lines are of
    /// steps that will be redone: the run starts over them.
    logged: usize,
}

impl Folder {
    /// Where a run in `dir` starts (the checkpoint `opts.resume` names,
    /// checked to be one) and what of an earlier run `dir` holds.
    fn inspect(dir: &Path, opts: &RunOptions) -> Result<Folder> {
        let resume = match opts.resume.as_deref() {
            None => None,
            Some("auto") => checkpoint::latest(dir)?,
            Some(path) => Some(PathBuf::from(path)),
        };
        let start = match &resume {
            Some(ckpt) => checkpoint_step(ckpt, dir)?,
            None => 0,
        };
        let newer = checkpoint::checkpoints_after(dir, start)?;
        let logged = if opts.resume.is_none() { logged_steps(&dir.join("metrics.jsonl"))? } else { 0 };
        Ok(Folder { resume, start, newer, logged })
    }

    /// Whether starting here would overwrite something.
    fn would_overwrite(&self) -> bool {
        !self.newer.is_empty() || self.logged > 0
    }

    /// `checkpoint step 2`, `3 checkpoints, steps 1..3 and metrics.jsonl with 3 step(s)`.
    fn describe(&self) -> String {
        let checkpoints = match (self.newer.first(), self.newer.last()) {
            (Some((a, _)), Some((b, _))) if a == b => format!("checkpoint step {a}"),
            (Some((a, _)), Some((b, _))) => format!("{} checkpoints, steps {a}..{b}", self.newer.len()),
            _ => String::new(),
        };
        match (checkpoints.is_empty(), self.logged) {
            (_, 0) => checkpoints,
            (true, n) => format!("metrics.jsonl with {n} step(s)"),
            (false, n) => format!("{checkpoints} and metrics.jsonl with {n} step(s)"),
        }
    }

    /// The refusal of a start that would overwrite `dir`'s run.
    fn refusal(&self, dir: &Path) -> crate::error::Error {
        let what = self.describe();
        match &self.resume {
            None => crate::error::format_err!(
                "{} already holds a run ({what}); nothing was changed. Pass --resume auto to continue it, --overwrite to delete it and start over, or another --out",
                dir.display()
            ),
            Some(ckpt) => crate::error::format_err!(
                "resuming {} (step {}) would overwrite the newer {what} in {}; nothing was changed. Pass --resume auto to continue from the newest, or --overwrite to delete what comes after step {}",
                ckpt.display(),
                self.start,
                dir.display(),
                self.start
            ),
        }
    }
}

/// Refuses (changing nothing) a run that would overwrite what `dir` holds
/// of an earlier run, unless `opts.overwrite`: a fresh run in a folder with
/// checkpoints or metrics lines, a resume from a checkpoint older than the
/// folder's newest. Commands call it before they read anything at length.
pub fn check_folder(dir: &Path, opts: &RunOptions) -> Result<()> {
    let folder = Folder::inspect(dir, opts)?;
    if folder.would_overwrite() && !opts.overwrite {
        return Err(folder.refusal(dir));
    }
    Ok(())
}

/// Where a run in `dir` starts (none: fresh), after [`check_folder`]'s
/// refusal; with `opts.overwrite`, the checkpoints after the starting step
/// (and, for a fresh run, the metrics and rank logs) are removed first.
pub fn prepare_folder(dir: &Path, opts: &RunOptions) -> Result<Option<PathBuf>> {
    let folder = Folder::inspect(dir, opts)?;
    if !folder.would_overwrite() {
        return Ok(folder.resume);
    }
    if !opts.overwrite {
        return Err(folder.refusal(dir));
    }
    // With several ranks, rank 0 alone removes (the others saw the same folder).
    if dist::current().rank() != 0 {
        return Ok(folder.resume);
    }
    for (_, path) in &folder.newer {
        std::fs::remove_dir_all(path).with_context(|| format!("--overwrite: removing {}", path.display()))?;
    }
    if folder.resume.is_none() {
        for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if name == "metrics.jsonl" || (name.starts_with("rank-") && name.ends_with(".jsonl")) {
                std::fs::remove_file(&path).with_context(|| format!("--overwrite: removing {}", path.display()))?;
            }
        }
    }
    crate::progress::say(&format!("--overwrite: removed the {} of {}", folder.describe(), dir.display()));
    Ok(folder.resume)
}

/// The step of the checkpoint `ckpt` (a `--resume` folder), or an error
/// that says what the folder is not, and for a broken one in `run_dir`, the
/// complete checkpoint before it.
fn checkpoint_step(ckpt: &Path, run_dir: &Path) -> Result<u64> {
    crate::error::ensure!(ckpt.is_dir(), "--resume {}: no such folder", ckpt.display());
    let has_state = ckpt.join(checkpoint::STATE_FILE).exists();
    if !has_state && !ckpt.join(checkpoint::DONE_FILE).exists() {
        let newest = checkpoint::latest(ckpt).ok().flatten();
        crate::error::bail!(
            "--resume {}: not a checkpoint (a run's step_NNNNNNNN folder, with state.json and DONE){}",
            ckpt.display(),
            match newest {
                Some(n) => format!("; it is a run folder whose newest checkpoint is {}: pass --resume auto with --out {}, or --resume {}", n.display(), ckpt.display(), n.display()),
                None => "; pass --resume auto to continue the run in --out".into(),
            }
        );
    }
    checkpoint::load_state(ckpt).map(|s| s.step).map_err(|e| broken_checkpoint(e, ckpt, run_dir))
}

/// `err` about checkpoint `ckpt`, with the complete checkpoint of `run_dir`
/// before it named (where a resume can go instead).
pub(super) fn broken_checkpoint(err: crate::error::Error, ckpt: &Path, run_dir: &Path) -> crate::error::Error {
    let mine = ckpt.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_prefix("step_")).and_then(|s| s.parse::<u64>().ok());
    let previous = checkpoint::complete_checkpoints(run_dir).ok().and_then(|all| all.into_iter().rev().find(|(s, _)| mine.is_some_and(|m| *s < m)));
    match previous {
        Some((_, prev)) => err.context(format!(
            "checkpoint {} cannot be resumed; the complete checkpoint before it is {}: pass --resume {} --overwrite to continue from there (the newer checkpoints are deleted)",
            ckpt.display(),
            prev.display(),
            prev.display()
        )),
        None => err.context(format!("checkpoint {} cannot be resumed, and no complete checkpoint comes before it in {}", ckpt.display(), run_dir.display())),
    }
}

/// How many step lines `path` (a metrics.jsonl) holds; 0 when absent.
fn logged_steps(path: &Path) -> Result<usize> {
    if !path.exists() {
        return Ok(0);
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text.lines().filter(|l| !l.trim().is_empty()).count())
}

