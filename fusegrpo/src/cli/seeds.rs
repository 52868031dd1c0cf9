//! `fusegrpo seeds RUN...`: several pipeline runs (seeds of one config) side
//! by side, in Markdown for README and BENCHMARKS: each run's stage table,
//! each run's paired differences and their pooling over the runs (a held-out
//! task is one bootstrap cluster across runs), and how many held-out tasks a
//! given gain would need at the measured spread.

use trainer::episodes::jsonl::read as read_episodes;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use recipe::pipeline::{stats, Report};

#[derive(clap::Args)]
pub struct Args {
    /// Finished pipeline run folders (each with report.json and eval/{base,sft,grpo}.jsonl).
    #[arg(required = true)]
    pub runs: Vec<PathBuf>,
    /// The reward gain to size the held-out set for.
    #[arg(long, default_value_t = 0.03)]
    pub gain: f64,
    /// Also write the pooled differences as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

const STAGES: [&str; 3] = ["base", "sft", "grpo"];
const PAIRS: [(&str, &str); 3] = [("sft", "base"), ("grpo", "sft"), ("grpo", "base")];

/// One finished run: its report and each stage's per-task mean reward.
struct Run {
    name: String,
    report: Report,
    rewards: BTreeMap<&'static str, BTreeMap<String, f64>>,
}

pub fn run(args: Args) -> Result<()> {
    anyhow::ensure!(args.gain > 0.0, "--gain must be above 0 (got {})", args.gain);
    let reports: Vec<PathBuf> = args.runs.iter().map(|r| r.join("report.json")).collect();
    let inputs: Vec<(&str, &Path)> = args.runs.iter().chain(&reports).map(|p| ("RUNS", p.as_path())).collect();
    trainer::files::check_outputs(&inputs, &args.json.iter().map(|j| ("--json", j.as_path())).collect::<Vec<_>>())?;
    let runs = args.runs.iter().map(|dir| load(dir)).collect::<Result<Vec<_>>>()?;
    let pooled = pool(&runs);
    out!("{}", stage_table(&runs));
    outln!();
    out!("{}", paired_table(&runs, &pooled));
    outln!();
    out!("{}", sizes(&pooled, args.gain));
    if let Some(path) = &args.json {
        let map: BTreeMap<String, stats::Pooled> = pooled.iter().map(|(k, v)| (k.clone(), *v)).collect();
        std::fs::write(path, serde_json::to_string_pretty(&map)?).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn load(dir: &Path) -> Result<Run> {
    let report_path = dir.join("report.json");
    let text = std::fs::read_to_string(&report_path)
        .with_context(|| format!("{}: no report (is {} a finished `fusegrpo pipeline` run?)", report_path.display(), dir.display()))?;
    let report: Report = serde_json::from_str(&text).with_context(|| format!("{}: not a pipeline report", report_path.display()))?;
    let mut rewards = BTreeMap::new();
    for stage in STAGES {
        let path = dir.join("eval").join(format!("{stage}.jsonl"));
        let episodes = read_episodes(&path).with_context(|| format!("the {stage} evaluation of {}", dir.display()))?;
        anyhow::ensure!(!episodes.is_empty(), "{}: no episodes", path.display());
        rewards.insert(stage, stats::task_rewards(&episodes));
    }
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| dir.display().to_string());
    Ok(Run { name, report, rewards })
}

/// Each pair pooled over all runs, keyed `later_vs_earlier`.
fn pool(runs: &[Run]) -> Vec<(String, stats::Pooled)> {
    PAIRS
        .iter()
        .map(|(later, earlier)| {
            let pairs: Vec<_> = runs.iter().map(|r| (&r.rewards[earlier], &r.rewards[later])).collect();
            (format!("{later}_vs_{earlier}"), stats::pooled_paired(&pairs))
        })
        .collect()
}

fn stage_table(runs: &[Run]) -> String {
    let mut out = String::from(
        "| run | stage | reward [95% CI] | F1 file | F1 function | e | turns | calls/turn | answered | episodes |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in runs {
        for stage in STAGES {
            let Some(row) = r.report.stages.get(stage) else { continue };
            let ci = row.reward_ci95.map(|[lo, hi]| format!(" [{lo:.3}, {hi:.3}]")).unwrap_or_default();
            let s = &row.summary;
            let _ = writeln!(
                out,
                "| {} | {stage} | {:.3}{ci} | {:.3} | {:.3} | {:.3} | {:.2} | {:.2} | {:.2} | {} |",
                r.name, s.reward, s.f1_file, s.f1_func, s.e, s.turns, s.calls_per_turn, s.answered, s.episodes
            );
        }
    }
    out
}

fn paired_table(runs: &[Run], pooled: &[(String, stats::Pooled)]) -> String {
    let mut out = String::from("| run | tasks | SFT - base | GRPO - SFT | GRPO - base |\n|---|---|---|---|---|\n");
    let cell = |mean: f64, [lo, hi]: [f64; 2]| {
        let above = if lo > 0.0 { " (above 0)" } else { "" };
        format!("{mean:+.3} [{lo:+.3}, {hi:+.3}]{above}")
    };
    for r in runs {
        let cells: Vec<String> = PAIRS
            .iter()
            .map(|(later, earlier)| {
                let p = stats::paired(&r.rewards[earlier], &r.rewards[later]);
                cell(p.mean, p.ci95)
            })
            .collect();
        let tasks = r.rewards["grpo"].len();
        let _ = writeln!(out, "| {} | {tasks} | {} |", r.name, cells.join(" | "));
    }
    let cells: Vec<String> = pooled.iter().map(|(_, p)| cell(p.mean, p.ci95)).collect();
    let (tasks, units) = pooled.first().map(|(_, p)| (p.tasks, p.units)).unwrap_or_default();
    let _ = writeln!(out, "| all {} runs, pooled | {tasks} tasks, {units} pairs | {} |", runs.len(), cells.join(" | "));
    out
}

fn sizes(pooled: &[(String, stats::Pooled)], gain: f64) -> String {
    let mut out = String::new();
    for (name, p) in pooled {
        let _ = writeln!(
            out,
            "{name}: spread across tasks (sd of a task's mean difference) {:.3}; a true gain of {gain} needs about {:.0} held-out tasks \
             for its 95% interval to exclude 0 with 80% probability (here {})",
            p.task_sd,
            p.tasks_for_gain(gain),
            p.tasks
        );
    }
    out
}
