//! `fusegrpo bench grep`: our grep on a warm in-memory snapshot against
//! ripgrep (`rg`) on a checkout of the same tree, side by side.

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};
use rollout::repo::SnapshotStore;
use rollout::toolcall::ToolCall;
use rollout::tools::{grep_matches, GrepQuery, ToolConfig, ToolRunner};

/// Patterns used when none are given: a rare literal, a common word, a
/// case-insensitive word, a regex with classes, an alternation.
const DEFAULT_PATTERNS: &[&str] =
    &["zqxjkv_never", "import", "(?i)deprecated", r"def \w+_\w+\(self", "TODO|FIXME|XXX"];

/// The snapshot a benchmark runs on (`bench grep`, `bench search`).
#[derive(clap::Args)]
pub struct SnapshotArgs {
    /// Folder holding repositories named `owner__name`.
    #[arg(long)]
    pub repos_dir: PathBuf,
    /// Repository, `owner/name`.
    #[arg(long)]
    pub repo: String,
    /// Commit to load.
    #[arg(long, default_value = "HEAD")]
    pub commit: String,
}

impl SnapshotArgs {
    /// The snapshot, loaded by a new store (nothing kept from an earlier load).
    pub fn load(&self) -> Result<std::sync::Arc<rollout::repo::Snapshot>> {
        Ok(SnapshotStore::open(&self.repos_dir).get(&self.repo, &self.commit)?)
    }
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub snapshot: SnapshotArgs,
    /// A checkout of the same tree for rg (e.g. from `git archive | tar -x`).
    #[arg(long)]
    pub checkout: PathBuf,
    /// Regex patterns (default: a fixed mix).
    #[arg(long = "pattern")]
    pub patterns: Vec<String>,
    /// Timed runs per measurement (the median is reported).
    #[arg(long, default_value_t = 7)]
    pub runs: usize,
}

pub fn run(args: Args, out: &mut dyn Write) -> Result<()> {
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let rss_before = rss_mib();
    // Host work only (no tensors): the clock's device is the CPU.
    let start = super::Clock::start(&candle_core::Device::Cpu)?;
    let snapshot = args.snapshot.load()?;
    let load_s = start.seconds()?;
    let rss_after = rss_mib();
    writeln!(
        out,
        "snapshot {}@{}: {} entries, {:.1} MiB of text, load {:.3} s, RSS {:.0} -> {:.0} MiB (+{:.0}), rayon threads {}",
        args.snapshot.repo,
        &snapshot.commit()[..12],
        snapshot.files().len(),
        snapshot.text_bytes() as f64 / (1 << 20) as f64,
        load_s,
        rss_before,
        rss_after,
        rss_after - rss_before,
        rayon::current_num_threads()
    )?;
    let patterns: Vec<String> = if args.patterns.is_empty() {
        DEFAULT_PATTERNS.iter().map(|s| s.to_string()).collect()
    } else {
        args.patterns.clone()
    };
    writeln!(out, "| pattern | matches (ours / rg) | ours, all matches (ms) | ours, tool call capped (ms) | rg (ms) | ours/rg |")?;
    writeln!(out, "|---|---|---|---|---|---|")?;
    let config = ToolConfig::default();
    let runner = ToolRunner::default();
    for pattern in &patterns {
        let query = GrepQuery::new(&snapshot, pattern, false, "", None, &config)
            .map_err(|e| anyhow::anyhow!("{pattern}: {e}"))?;
        let ours_count: usize = grep_matches(&query, usize::MAX).iter().map(|(_, l)| l.len()).sum();
        let full = median_ms(args.runs, || {
            grep_matches(&query, usize::MAX);
        })?;
        let call: ToolCall = serde_json::from_value(serde_json::json!({"name": "grep", "arguments": {"pattern": pattern}}))?;
        let capped = median_ms(args.runs, || {
            runner.run(&snapshot, &call);
        })?;
        let rg_count = rg(pattern, &args.checkout)?; // warms the page cache
        let rg_ms = median_ms(args.runs, || {
            let _ = rg(pattern, &args.checkout);
        })?;
        writeln!(
            out,
            "| `{}` | {ours_count} / {rg_count} | {full:.1} | {capped:.1} | {rg_ms:.1} | {:.2} |",
            pattern.replace('|', "\\|"),
            full / rg_ms
        )?;
    }
    Ok(())
}

/// Runs rg like our grep (line numbers, every file, no ignore rules) and
/// returns the number of matching lines.
fn rg(pattern: &str, dir: &PathBuf) -> Result<usize> {
    let out = Command::new("rg")
        .args(["--no-config", "-uu", "-n", "--no-heading", "--color", "never", "-e", pattern])
        .arg(dir)
        .output()
        .context("running rg (apt-get install ripgrep)")?;
    Ok(out.stdout.iter().filter(|b| **b == b'\n').count())
}

pub(super) fn median_ms(runs: usize, mut f: impl FnMut()) -> Result<f64> {
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let clock = super::Clock::start(&candle_core::Device::Cpu)?;
        f();
        times.push(clock.seconds()? * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[runs / 2])
}

/// Resident set size of this process in MiB (Linux; 0 elsewhere).
pub(super) fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}
