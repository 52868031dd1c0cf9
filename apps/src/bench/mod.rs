//! The benchmarks of `fusegrpo bench ...`, each printing one JSON line (or,
//! for `memory` and `grep`, its table) so that time and peak memory can be
//! compared with the PyTorch/transformers counterparts in `scripts/`. Each
//! submodule's `Args` are its options (clap-derived, as the command takes
//! them) and its `run` the benchmark.

pub mod attention;
pub mod checkpoint;
pub mod decode;
pub mod grep;
pub mod logprob;
pub mod memory;
pub mod model;
pub mod ops;
pub mod shape;
pub mod step;

use anyhow::{ensure, Result};

/// A `/proc/self/status` memory field in KiB (0 where unavailable).
pub fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Resets the process's peak RSS (VmHWM) to its current RSS (Linux
/// `clear_refs` value 5); false where unsupported.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Sets the thread count of rayon's pool and of Candle's matmul (which
/// sizes its work by RAYON_NUM_THREADS); `None` keeps all cores.
pub fn set_threads(threads: Option<usize>) -> Result<()> {
    if let Some(t) = threads {
        ensure!(t > 0, "--threads must be positive");
        std::env::set_var("RAYON_NUM_THREADS", t.to_string());
        rayon::ThreadPoolBuilder::new().num_threads(t).build_global()?;
    }
    Ok(())
}

/// The median of `xs` (the mean of the middle two for an even count).
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Minor page faults of this process so far (`/proc/self/stat` field 10; 0
/// where unavailable): a warm step that still faults is re-mapping memory.
pub fn minor_faults() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| s.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(7).and_then(|v| v.parse().ok())))
        .unwrap_or(0)
}
