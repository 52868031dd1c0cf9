//! `fusegrpo compare A.jsonl B.jsonl...`: episode files of several models
//! on the same tasks (`fusegrpo eval --out` or `rollout --out`), side by side
//! in Markdown: each file's means with the 95% interval of R, and each later
//! file against the first, paired task by task (a task's mean over its
//! episodes; bootstrap over the tasks both files have, as the pipeline's
//! report does): R, file F1, function F1 and the answer rate. The question
//! it answers: did this adapter do better than that one on these tasks,
//! beyond the noise of which tasks they are?
//!
//! Ranked files (`eval --ranked`) compare the same way, each policy of a
//! file a column: set F1, accuracy@1/3/5 of files and functions and the
//! grounded rate, and every other column minus the first, paired by task;
//! or minus the first column of the policy `--against` names (`--against
//! search`: everything against the index search).

use anyhow::{Context, Result};
use rollout::episode::summary::{task_means, task_rewards, Summary};
use rollout::episode::Episode;
use serde::Serialize;
use std::fmt::Write;
use std::path::PathBuf;
use recipe::pipeline::stats;
use trainer::episodes::jsonl::read_unique as read_episodes;

#[derive(clap::Args)]
pub struct Args {
    /// Episode files (JSONL), or ranked files (`eval --ranked`); every file (policy) after the first is compared with the first.
    #[arg(required = true, num_args = 2..)]
    pub files: Vec<PathBuf>,
    /// Also write the figures as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Ranked files only: pair every column with the first column of this policy (`search`, `model`, `combined`...) instead of the first column.
    #[arg(long, value_name = "POLICY")]
    pub against: Option<String>,
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
    f1_func: stats::Paired,
    answered: stats::Paired,
    /// Tasks whose mean R is higher (lower) in the later file.
    better: usize,
    worse: usize,
}

const F1_FILE: fn(&Episode) -> f64 = |e| e.score.unwrap_or_default().f1_file;
const F1_FUNC: fn(&Episode) -> f64 = |e| e.score.unwrap_or_default().f1_func;
const ANSWERED: fn(&Episode) -> f64 = |e| e.answered() as u8 as f64;

pub fn run(args: Args) -> Result<()> {
    let inputs: Vec<(&str, &std::path::Path)> = args.files.iter().map(|p| ("FILES", p.as_path())).collect();
    trainer::files::check_outputs(&inputs, &args.json.iter().map(|j| ("--json", j.as_path())).collect::<Vec<_>>())?;
    if let Some(out) = compare_ranked(&args)? {
        out!("{out}");
        return Ok(());
    }
    // Each file: its name, episodes and per-task mean R.
    anyhow::ensure!(
        args.against.is_none(),
        "--against picks a policy of ranked files (eval --ranked); {} is an episode file, whose files pair with the first",
        args.files[0].display()
    );
    let mut loaded = Vec::new();
    for path in &args.files {
        let episodes = read_episodes(path)?;
        anyhow::ensure!(!episodes.is_empty(), "{}: no episodes", path.display());
        let rewards = task_rewards(&episodes);
        loaded.push((path.display().to_string(), episodes, rewards));
    }
    let files: Vec<FileRow> = loaded
        .iter()
        .map(|(file, episodes, rewards)| {
            let values: Vec<f64> = rewards.values().copied().collect();
            FileRow { file: file.clone(), tasks: values.len(), summary: Summary::of(episodes), reward_ci95: stats::mean_ci95(&values) }
        })
        .collect();
    let (first, first_episodes, a) = &loaded[0];
    let mut pairs = Vec::new();
    for (file, episodes, b) in &loaded[1..] {
        let reward = stats::paired(a, b);
        anyhow::ensure!(reward.tasks > 0, "{file} and {first} have no task in common: nothing to pair");
        let diffs: Vec<f64> = a.iter().filter_map(|(t, x)| b.get(t).map(|y| y - x)).collect();
        pairs.push(PairRow {
            earlier: first.clone(),
            later: file.clone(),
            tasks: reward.tasks,
            unpaired: a.len() + b.len() - 2 * reward.tasks,
            reward,
            f1_file: stats::paired(&task_means(first_episodes, F1_FILE), &task_means(episodes, F1_FILE)),
            f1_func: stats::paired(&task_means(first_episodes, F1_FUNC), &task_means(episodes, F1_FUNC)),
            answered: stats::paired(&task_means(first_episodes, ANSWERED), &task_means(episodes, ANSWERED)),
            better: diffs.iter().filter(|d| **d > 1e-12).count(),
            worse: diffs.iter().filter(|d| **d < -1e-12).count(),
        });
    }
    out!("{}", markdown(&files, &pairs));
    if let Some(path) = &args.json {
        let json = serde_json::json!({ "files": files, "paired": pairs });
        std::fs::write(path, serde_json::to_string_pretty(&json)?).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Ranked files: `None` when the first file is an episode file.
fn compare_ranked(args: &Args) -> Result<Option<String>> {
    use recipe::ranked;
    let mut columns: Vec<(String, Vec<rollout::ranking::TaskRanking>)> = Vec::new();
    for (i, path) in args.files.iter().enumerate() {
        let rows = ranked::read(path)?;
        match (i, rows) {
            (0, None) => return Ok(None),
            (_, None) => anyhow::bail!("{} is an episode file and {} a ranked file (eval --ranked): compare files of one kind", path.display(), args.files[0].display()),
            (_, Some(rows)) => {
                anyhow::ensure!(!rows.is_empty(), "{}: no ranked rows", path.display());
                let mut policies: Vec<String> = Vec::new();
                for r in &rows {
                    if !policies.contains(&r.policy) {
                        policies.push(r.policy.clone());
                    }
                }
                for p in policies {
                    let mine = rows.iter().filter(|r| r.policy == p).cloned().collect();
                    columns.push((format!("{} [{p}]", path.display()), mine));
                }
            }
        }
    }
    let views: Vec<(String, &[rollout::ranking::TaskRanking])> = columns.iter().map(|(l, r)| (l.clone(), r.as_slice())).collect();
    let base = match &args.against {
        None => 0,
        Some(policy) => views.iter().position(|(_, rows)| rows[0].policy == *policy).ok_or_else(|| {
            let mut have: Vec<&str> = Vec::new();
            for (_, rows) in &views {
                if !have.contains(&rows[0].policy.as_str()) {
                    have.push(&rows[0].policy);
                }
            }
            anyhow::anyhow!("--against {policy}: no file has rows of that policy (they have {})", have.join(", "))
        })?,
    };
    let pairs: Vec<(usize, usize)> = (0..views.len()).filter(|&i| i != base).map(|i| (i, base)).collect();
    if let Some(path) = &args.json {
        let summaries: Vec<_> = views.iter().map(|(l, r)| serde_json::json!({"ranking": l, "summary": rollout::ranking::RankSummary::of(r)})).collect();
        let paired: Vec<_> = pairs
            .iter()
            .map(|&(b, a)| serde_json::json!({"earlier": views[a].0, "later": views[b].0, "paired": ranked::paired(views[a].1, views[b].1)}))
            .collect();
        let json = serde_json::json!({ "rankings": summaries, "paired": paired });
        std::fs::write(path, serde_json::to_string_pretty(&json)?).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(Some(ranked::markdown(&views, &pairs)))
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
    let cell = recipe::ranked::cell;
    out += "\nPaired by task (each later file minus the first; 95% bootstrap over the tasks both have):\n\n";
    out += "| difference | tasks | R | file F1 | function F1 | answered | better / worse / same R |\n|---|---|---|---|---|---|---|\n";
    for p in pairs {
        let left_out = if p.unpaired > 0 { format!(" ({} unpaired left out)", p.unpaired) } else { String::new() };
        let _ = writeln!(
            out,
            "| {} - {} | {}{left_out} | {} | {} | {} | {} | {} / {} / {} |",
            p.later,
            p.earlier,
            p.tasks,
            cell(&p.reward),
            cell(&p.f1_file),
            cell(&p.f1_func),
            cell(&p.answered),
            p.better,
            p.worse,
            p.tasks - p.better - p.worse
        );
    }
    out
}
