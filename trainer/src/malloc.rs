//! glibc allocator settings for training's large, short-lived tensors.
//!
//! A training step allocates and frees many multi-megabyte buffers
//! (activations, attention scores, gradients). With glibc's defaults every
//! buffer above the mmap threshold (at most 32 MiB, adjusted on the fly) is a
//! fresh `mmap`, and the pages are zeroed by the kernel on first touch, then
//! returned with `munmap`; freed heap tops are trimmed back the same way. On
//! the CPU demo that was more system time than compute (SFT, 12 steps: 37.8 s
//! wall, 40 s system time; 14.7 s and 2.8 s with these settings, see
//! BENCHMARKS.md). Keeping freed memory in the heap lets the next step reuse
//! it: the peak stays what the step needs, the page faults go away.
//!
//! The settings can still be overridden: when `GLIBC_TUNABLES` names a malloc
//! tunable, or `FUSEGRPO_MALLOC=default` (glibc's defaults, for side-by-side
//! benchmarks), nothing is changed here.

/// Serve every allocation below this size from the heap, never `mmap`.
const MMAP_THRESHOLD: i32 = i32::MAX;
/// Never give freed heap memory back to the system (it is reused next step).
/// -1 is mallopt(3)'s "disable trimming completely" (glibc stores it as
/// SIZE_MAX); `i32::MAX` was not enough: a GRPO update frees more than 2 GiB
/// at the top of the heap after each micro-batch, which glibc then trimmed
/// and the next micro-batch faulted back in, page by page.
const TRIM_THRESHOLD: i32 = -1;
/// Grow the heap by at least this much at a time.
const TOP_PAD: i32 = 256 << 20;

/// What [`tune`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tuning {
    /// The three settings took effect.
    Applied,
    /// `GLIBC_TUNABLES` sets malloc tunables, or `FUSEGRPO_MALLOC=default`:
    /// glibc's settings were left as they are.
    LeftToEnvironment,
    /// glibc refused a setting (the others may have taken effect).
    Refused(&'static str),
    /// Not glibc on Linux: nothing to do.
    Unsupported,
}

/// Applies the allocator settings once, at start-up, before threads start.
pub fn tune() -> Tuning {
    let tunables = std::env::var("GLIBC_TUNABLES").is_ok_and(|v| v.contains("glibc.malloc."));
    if tunables || std::env::var("FUSEGRPO_MALLOC").is_ok_and(|v| v == "default") {
        return Tuning::LeftToEnvironment;
    }
    apply()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn apply() -> Tuning {
    let settings = [
        ("M_MMAP_THRESHOLD", libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        ("M_TRIM_THRESHOLD", libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD),
        ("M_TOP_PAD", libc::M_TOP_PAD, TOP_PAD),
    ];
    for (name, param, value) in settings {
        // SAFETY: mallopt only changes allocator parameters; it is called
        // before any other thread exists, as glibc requires for consistency.
        if unsafe { libc::mallopt(param, value) } != 1 {
            return Tuning::Refused(name);
        }
    }
    Tuning::Applied
}

/// Returns the heap's free pages to the system (glibc `malloc_trim(0)`,
/// which also releases whole free pages inside the heap). For one-off
/// frees the next steps will not reuse, such as the loaded copy of the
/// weights once they are trainable variables; without it that copy stays in
/// the process's resident set for the whole run.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory; it is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn apply() -> Tuning {
    Tuning::Unsupported
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn glibc_accepts_every_setting() {
        // glibc refuses out-of-range values (e.g. an mmap threshold above its
        // limit) with 0; every one of ours must be taken.
        assert_eq!(apply(), Tuning::Applied);
    }
}
