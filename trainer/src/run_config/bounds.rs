//! Upper bounds of the count settings (episodes, tasks, steps, turns,
//! tokens, rows), checked at load with the key named, so that a huge value
//! (`rollout.group = 9223372036854775807`) is a config error instead of an
//! allocation that panics or aborts the process midway. Each bound is far
//! above any run this trainer can make; the per-command flags that set the
//! same counts (`--group`, `--samples`, `--attempts`) use them too.

/// Episodes per task (`[rollout] group`, `--group`, `--samples`,
/// `[pipeline] samples` and `eval_group`, `--attempts`).
pub const MAX_GROUP: u64 = 1024;
/// Episodes one GRPO step rolls out: `group` x `tasks_per_step`.
pub const MAX_EPISODES_PER_STEP: u64 = 1 << 16;
/// Tasks, turns, rows, epochs, iterations, draws, retries.
pub const MAX_COUNT: u64 = 1_000_000;
/// Optimizer steps.
pub const MAX_STEPS: u64 = 1_000_000_000;
/// Tokens of one episode, turn or issue (16,777,216).
pub const MAX_TOKENS: u64 = 1 << 24;
/// Tokens of a pool or a batch: KV slots, a prefill forward, a micro-batch.
pub const MAX_POOL_TOKENS: u64 = 1 << 30;

/// The message when `value` is above `max`: "must be at most MAX, got VALUE".
pub fn at_most(value: u64, max: u64) -> Result<(), String> {
    if value > max {
        return Err(format!("must be at most {max}, got {value}"));
    }
    Ok(())
}

/// A per-command flag's count (`--group 0` or one above `max`), the error naming the flag.
pub fn check_flag(flag: &str, value: usize, max: u64) -> crate::error::Result<()> {
    crate::error::ensure!(value >= 1, "{flag} {value}: must be at least 1");
    at_most(value as u64, max).map_err(|m| crate::error::format_err!("{flag} {value}: {m}"))
}
