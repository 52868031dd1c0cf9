//! The CPU thread count, fixed once at start-up.
//!
//! Candle asks for its thread count at every CPU matrix product
//! (`candle_core::utils::get_num_threads`): unless `RAYON_NUM_THREADS` is
//! set, that reads and parses `/proc/cpuinfo` (`num_cpus::get_physical`)
//! each time. A decode step of a small model runs dozens of products, and
//! the kernel's formatting of cpuinfo was ~5% of it. [`pin`] asks once and
//! stores the answer in `RAYON_NUM_THREADS`, so every later call reads the
//! same number from the environment: the products keep the parallelism they
//! had, and rayon's global pool takes the same count.

/// What [`pin`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pinned {
    /// `RAYON_NUM_THREADS` was already set: left as it is.
    FromEnvironment(String),
    /// Set to Candle's own choice.
    Set(usize),
}

/// Fixes `RAYON_NUM_THREADS` to Candle's choice when it is unset. Call
/// before any other thread starts (the environment is process-wide).
pub fn pin() -> Pinned {
    if let Ok(v) = std::env::var("RAYON_NUM_THREADS") {
        return Pinned::FromEnvironment(v);
    }
    let n = candle_core::utils::get_num_threads();
    std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    Pinned::Set(n)
}

// Tested end to end (tests/suite/cli_env.rs): setting the environment from a
// unit test would race the other tests' threads, which read it.
