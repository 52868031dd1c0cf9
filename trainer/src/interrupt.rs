//! SIGINT/SIGTERM during a run: the first signal asks the training loop
//! to stop after its step with a checkpoint ([`flag`]); a second ends the
//! process at once, naming the last complete checkpoint.

use crate::error::{Context, Result};
use std::path::Path;

/// The process's exit status when a run stopped on SIGINT/SIGTERM with a
/// checkpoint saved (128 + SIGINT, as shells report an interrupted command).
pub const EXIT_INTERRUPTED: u8 = 130;

pub use crate::error::Interrupted;

/// The run folder a second Ctrl-C names (its newest complete checkpoint).
static RUN_DIR: std::sync::Mutex<Option<std::path::PathBuf>> = std::sync::Mutex::new(None);

/// Tell the interrupt handler which run folder is training now.
pub fn set_run_dir(dir: &Path) {
    *RUN_DIR.lock().unwrap_or_else(|p| p.into_inner()) = Some(dir.to_path_buf());
}

/// The process's SIGINT/SIGTERM flag: the handler is installed once, on
/// first use, and every training loop of the process polls the same flag.
/// The first signal asks the loop to stop after its step (with a
/// checkpoint); a second ends the process at once with exit status 130,
/// naming the last complete checkpoint.
pub fn flag() -> Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    // Installed under a lock: runs in several threads of one process (the
    // library's tests) share the one handler.
    static FLAG: Mutex<Option<Arc<AtomicBool>>> = Mutex::new(None);
    let mut installed = FLAG.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(f) = &*installed {
        return Ok(f.clone());
    }
    let flag = Arc::new(AtomicBool::new(false));
    let handler_flag = flag.clone();
    ctrlc::set_handler(move || {
        if !handler_flag.swap(true, Ordering::SeqCst) {
            crate::progress::say("interrupt: stopping after this step with a checkpoint (interrupt again to stop at once)");
            return;
        }
        let dir = RUN_DIR.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let last = dir.as_deref().and_then(|d| crate::checkpoint::latest(d).ok().flatten());
        match last {
            Some(last) => crate::progress::say(&format!("second interrupt: stopped at once; the last complete checkpoint is {} (resume with --resume auto)", last.display())),
            None => crate::progress::say("second interrupt: stopped at once; no complete checkpoint was saved"),
        }
        std::process::exit(EXIT_INTERRUPTED as i32);
    })
    .context("installing the SIGINT/SIGTERM handler")?;
    *installed = Some(flag.clone());
    Ok(flag)
}
