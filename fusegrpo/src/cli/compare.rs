//! `fusegrpo compare A.jsonl B.jsonl...`: episode files of several models
//! on the same tasks (`fusegrpo eval --out` or `rollout --out`), side by side
//! in Markdown: each file's means with the 95% interval of R, and each later
//! file against the first, paired task by task (a task's mean over its
//! episodes; bootstrap over the tasks both files have, as the pipeline's
//! report does). The question it answers: did this adapter do better than
//! that one on these tasks, beyond the noise of which tasks they are?

use anyhow::{Context, Result};
use rollout::episode::summary::Summary;
use rollout::episode::Episode;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::PathBuf;
use trainer::pipeline::stats;
use trainer::rollouts::episodes::read as read_episodes;

#[derive(clap::Args)]
pub struct Args {
    /// Episode files (JSONL); every file after the first is compared with the first.
    #[arg(required = true, num_args = 2..)]
    pub files: Vec<PathBuf>,
    /// Also write the figures as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One file's means, and the interval of its mean R over tasks.
#[derive(Serialize)]
struct FileRow {
    file: String,
    tasks: usize,
    summary: Summary,
    reward_ci95: [f64; 2],
}

/// A later file minus the first, on the tasks both have.
#[derive(Serialize)]
struct PairRow {
    earlier: String,
    later: String,
    tasks: usize,
    /// Tasks of one file only, left out of the pairing.
    unpaired: usize,
    reward: stats::Paired,
    f1_file: stats::Paired,
    answered: stats::Paired,
    /// Tasks whose mean R is higher (lower) in the later file.
    better: usize,
    worse: usize,
}

/// Per task, the mean of `metric` over its episodes.
fn per_task(episodes: &[Episode], metric: fn(&Episode) -> f64) -> BTreeMap<String, f64> {
    let mut sums: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    for e in episodes {
        let s = sums.entry(e.task_id.clone()).or_default();
        s.0 += metric(e);
        s.1 += 1;
    }
    sums.into_iter().map(|(k, (sum, n))| (k, sum / n as f64)).collect()
}

const REWARD: fn(&Episode) -> f64 = |e| e.score.unwrap_or_default().reward;
const F1_FILE: fn(&Episode) -> f64 = |e| e.score.unwrap_or_default().f1_file;
const ANSWERED: fn(&Episode) -> f64 = |e| e.answered() as u8 as f64;

pub fn run(args: Args) -> Result<()> {
    let mut loaded = Vec::new();
    for path in &args.files {
        let episodes = read_episodes(path)?;
        anyhow::ensure!(!episodes.is_empty(), "{}: no episodes", path.display());
        loaded.push((path.display().to_string(), episodes));
    }
    let files: Vec<FileRow> = loaded
        .iter()
        .map(|(file, episodes)| {
            let rewards: Vec<f64> = per_task(episodes, REWARD).into_values().collect();
            FileRow { file: file.clone(), tasks: rewards.len(), summary: Summary::of(episodes), reward_ci95: stats::mean_ci95(&rewards) }
        })
        .collect();
    let (first, first_episodes) = &loaded[0];
    let mut pairs = Vec::new();
    for (file, episodes) in &loaded[1..] {
        let (a, b) = (per_task(first_episodes, REWARD), per_task(episodes, REWARD));
        let shared = a.keys().filter(|t| b.contains_key(*t)).count();
        anyhow::ensure!(shared > 0, "{file} and {first} have no task in common: nothing to pair");
        let diffs: Vec<f64> = a.iter().filter_map(|(t, x)| b.get(t).map(|y| y - x)).collect();
        pairs.push(PairRow {
            earlier: first.clone(),
            later: file.clone(),
            tasks: shared,
            unpaired: a.len() + b.len() - 2 * shared,
            reward: stats::paired(&a, &b),
            f1_file: stats::paired(&per_task(first_episodes, F1_FILE), &per_task(episodes, F1_FILE)),
            answered: stats::paired(&per_task(first_episodes, ANSWERED), &per_task(episodes, ANSWERED)),
            better: diffs.iter().filter(|d| **d > 1e-12).count(),
            worse: diffs.iter().filter(|d| **d < -1e-12).count(),
        });
    }
    print!("{}", markdown(&files, &pairs));
    if let Some(path) = &args.json {
        let json = serde_json::json!({ "files": files, "paired": pairs });
        std::fs::write(path, serde_json::to_string_pretty(&json)?).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn markdown(files: &[FileRow], pairs: &[PairRow]) -> String {
    let mut out = String::from(
        "| episodes | tasks | episodes per task | file F1 | function F1 | e | R [95% CI] | answered |\n|---|---|---|---|---|---|---|---|\n",
    );
    for f in files {
        let s = &f.summary;
        let [lo, hi] = f.reward_ci95;
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {:.3} | {:.3} | {:.3} | {:.3} [{lo:.3}, {hi:.3}] | {:.2} |",
            f.file,
            f.tasks,
            s.episodes as f64 / f.tasks as f64,
            s.f1_file,
            s.f1_func,
            s.e,
            s.reward,
            s.answered
        );
    }
    let cell = |p: &stats::Paired| {
        let [lo, hi] = p.ci95;
        let side = if lo > 0.0 {
            " (above 0)"
        } else if hi < 0.0 {
            " (below 0)"
        } else {
            ""
        };
        format!("{:+.3} [{lo:+.3}, {hi:+.3}]{side}", p.mean)
    };
    out += "\nPaired by task (each later file minus the first; 95% bootstrap over the tasks both have):\n\n";
    out += "| difference | tasks | R | file F1 | answered | better / worse / same R |\n|---|---|---|---|---|---|\n";
    for p in pairs {
        let left_out = if p.unpaired > 0 { format!(" ({} unpaired left out)", p.unpaired) } else { String::new() };
        let _ = writeln!(
            out,
            "| {} - {} | {}{left_out} | {} | {} | {} | {} / {} / {} |",
            p.later,
            p.earlier,
            p.tasks,
            cell(&p.reward),
            cell(&p.f1_file),
            cell(&p.answered),
            p.better,
            p.worse,
            p.tasks - p.better - p.worse
        );
    }
    out
}
