//! `fusegrpo bench search`: the search index of one snapshot (issue 62):
//! its build time from a freshly loaded snapshot (tree-sitter spans parsed
//! anew every run), the time of one query, its heap and the process's RSS.

use std::io::Write;
use anyhow::{bail, Result};
use rollout::search::{Index, IndexConfig, Query, SearchConfig};

/// Queries used when none are given: an issue's words, a traceback frame,
/// backticked names, a file path, one common word.
const DEFAULT_QUERIES: &[&str] = &[
    "simplify returns the wrong result for nested powers with negative exponents",
    "Traceback (most recent call last):\n  File \"lib/core/basic.py\", line 120, in subs\n    return self._subs(old, new)\nTypeError: unhashable type",
    "`Matrix.det` raises `ZeroDivisionError` for a singular `Matrix` with symbols",
    "the printer in printing/latex.py drops parentheses",
    "error",
];

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub snapshot: super::grep::SnapshotArgs,
    /// Query texts (default: a fixed mix of issue-like texts).
    #[arg(long = "query")]
    pub queries: Vec<String>,
    /// Timed runs per measurement (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
}

pub fn run(args: Args, out: &mut dyn Write) -> Result<()> {
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let snapshot = args.snapshot.load()?;
    let rss_loaded = super::grep::rss_mib();
    let cfg = IndexConfig::default();
    let mut builds = Vec::with_capacity(args.runs);
    let mut index = None;
    for _ in 0..args.runs {
        // A fresh snapshot each run: its spans are parsed again, as on a first call.
        let fresh = args.snapshot.load()?;
        let clock = super::Clock::start(&candle_core::Device::Cpu)?;
        let built = Index::build(&fresh, &cfg);
        builds.push(clock.seconds()?);
        index = Some(built);
    }
    builds.sort_by(f64::total_cmp);
    let index = index.expect("runs >= 1");
    // The same snapshot again: its spans are parsed, so this is the index alone.
    Index::build(&snapshot, &cfg);
    let mut warm = Vec::with_capacity(args.runs);
    for _ in 0..args.runs {
        let clock = super::Clock::start(&candle_core::Device::Cpu)?;
        Index::build(&snapshot, &cfg);
        warm.push(clock.seconds()?);
    }
    warm.sort_by(f64::total_cmp);
    writeln!(
        out,
        "index of {}@{}: {} files, {} entities, build median {:.2} s (min {:.2}, max {:.2}; {:.2} s of it without parsing spans; {} runs, rayon threads {}), index heap {:.1} MiB, RSS {:.0} MiB with the snapshot loaded",
        args.snapshot.repo,
        &snapshot.commit()[..12.min(snapshot.commit().len())],
        index.files.len(),
        index.entities.len(),
        builds[builds.len() / 2],
        builds[0],
        builds[builds.len() - 1],
        warm[warm.len() / 2],
        args.runs,
        rayon::current_num_threads(),
        index.heap_bytes() as f64 / (1 << 20) as f64,
        rss_loaded,
    )?;
    let queries: Vec<String> = if args.queries.is_empty() { DEFAULT_QUERIES.iter().map(|s| s.to_string()).collect() } else { args.queries.clone() };
    let search = SearchConfig::default();
    writeln!(out, "| query | first file | query (ms) |")?;
    writeln!(out, "|---|---|---|")?;
    for text in &queries {
        let query = match Query::from_issue(text, &search) {
            Ok(q) => q,
            Err(e) => {
                writeln!(out, "| {} | ({e}) | - |", one_line(text))?;
                continue;
            }
        };
        let first = index.search(&query, &search).files.first().map(|f| f.path.clone()).unwrap_or_default();
        let ms = super::grep::median_ms(args.runs, || {
            index.search(&query, &search);
        })?;
        writeln!(out, "| {} | {first} | {ms:.1} |", one_line(text))?;
    }
    Ok(())
}

fn one_line(text: &str) -> String {
    let line: String = text.replace('\n', " ").replace('|', "\\|").chars().take(60).collect();
    format!("`{line}`")
}
