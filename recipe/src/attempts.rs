//! Test-time scaling as `eval` and `rollout` run it (`--attempts N`):
//! the attempts and selections through [`rollout::scaling::evaluate`] with
//! the chosen judge, their table, and their output folder (attempts.jsonl,
//! selection.jsonl, refine.jsonl, scaling.json, scaling.png).

use trainer::episodes::jsonl::write_episodes;
use trainer::episodes::{http_teacher_config, on_done, progress_bar, with_policy, TeacherOpts};
use trainer::files::write_json_lines;
use trainer::run_config::{PolicyChoice, RunConfig};
use anyhow::{bail, Context, Result};
use rollout::scaling::{evaluate, JudgeChoice, ScalingConfig, ScalingRow, ScalingRun};
use rollout::tasks::Task;
use rollout::teacher::http::HttpTeacher;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

/// Who judges tournaments.
#[derive(Debug, Clone, PartialEq)]
pub enum JudgeSpec {
    /// No model: the attempt whose answer more distinct calls surfaced.
    Evidence,
    /// The policy being evaluated, prompted as a judge.
    Model,
    /// An OpenAI-compatible endpoint.
    Http(String),
}

impl JudgeSpec {
    /// The judge's name for tables and files.
    pub fn name(&self) -> String {
        match self {
            JudgeSpec::Evidence => "evidence".into(),
            JudgeSpec::Model => "model".into(),
            JudgeSpec::Http(url) => url.clone(),
        }
    }
}

impl FromStr for JudgeSpec {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "evidence" => Ok(JudgeSpec::Evidence),
            "model" => Ok(JudgeSpec::Model),
            url if url.starts_with("http://") || url.starts_with("https://") => Ok(JudgeSpec::Http(url.into())),
            other => Err(format!("`{other}`: expected evidence, model or an http(s):// URL")),
        }
    }
}

/// Runs the attempts and selections of `sc` on `tasks` with `policy`.
pub fn run(
    cfg: &RunConfig,
    tasks: &[Task],
    policy: &PolicyChoice,
    teacher: &TeacherOpts,
    judge: &JudgeSpec,
    judge_model: &str,
    sc: &ScalingConfig,
) -> Result<ScalingRun> {
    let mut teacher = teacher.clone();
    if matches!(policy, PolicyChoice::Scripted | PolicyChoice::Guided) && teacher.vary_scripted.is_none() {
        teacher.vary_scripted = Some(cfg.sampling.seed);
    }
    with_policy(cfg, policy, &teacher, |policy, env| {
        let refines = if sc.refine { rollout::scaling::sweep(sc.attempts).len() * sc.selectors.len() } else { 0 };
        let bar = progress_bar((tasks.len() * (sc.attempts + refines)) as u64, "episodes");
        let mut http = match judge {
            JudgeSpec::Http(url) => {
                let http = trainer::episodes::Endpoint { model: judge_model.to_string(), ..teacher.http.clone() };
                let opts = TeacherOpts { http, ..teacher.clone() };
                Some(http_judge(cfg, url, &opts)?)
            }
            _ => None,
        };
        let choice = match (judge, http.as_mut()) {
            (JudgeSpec::Evidence, _) => JudgeChoice::Evidence,
            (JudgeSpec::Model, _) => JudgeChoice::SamePolicy,
            (JudgeSpec::Http(_), Some(h)) => JudgeChoice::Other(h),
            (JudgeSpec::Http(url), None) => bail!("judge {url}: not set up"),
        };
        let run = evaluate(policy, choice, env, tasks, &cfg.episode, sc, on_done(&bar))?;
        bar.finish_and_clear();
        Ok(run)
    })
}

/// An HTTP judge: greedy, few retries (a refusing judge falls back fast).
fn http_judge(cfg: &RunConfig, url: &str, opts: &TeacherOpts) -> Result<HttpTeacher> {
    let mut tcfg = http_teacher_config(cfg, url, opts);
    tcfg.temperature = Some(0.0);
    tcfg.max_retries = 2;
    tcfg.max_backoff = Duration::from_secs(2);
    HttpTeacher::new(tcfg).with_context(|| format!("judge {url}"))
}

/// The table of a run, with the judge's fallbacks called out.
pub fn report(run: &ScalingRun, judge: &str) -> String {
    let mut out = format!("{}\n", ScalingRow::HEADER);
    for r in &run.rows {
        out.push_str(&r.line());
        out.push('\n');
    }
    let matches: Vec<_> = run.selections.iter().filter_map(|s| s.tournament.as_ref()).flat_map(|t| &t.matches).collect();
    let fell: Vec<_> = matches.iter().filter(|m| m.fallback.is_some()).collect();
    if !fell.is_empty() {
        let why = fell[0].fallback.as_deref().unwrap_or("");
        out.push_str(&format!(
            "judge {judge}: {} of {} comparisons decided by the evidence fallback (first: {why})\n",
            fell.len(),
            matches.len()
        ));
    }
    out
}

/// Writes the run's files under `dir` (created); the scaling plot is the
/// caller's (`apps::plot::scaling::draw_dir`).
pub fn write_dir(dir: &Path, run: &ScalingRun, sc: &ScalingConfig, policy: &str, judge: &str) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    write_episodes(&dir.join("attempts.jsonl"), &run.attempts)?;
    write_json_lines(&dir.join("selection.jsonl"), &run.selections)?;
    let summaries: Vec<_> = run.summaries.iter().flatten().collect();
    write_json_lines(&dir.join("summaries.jsonl"), &summaries)?;
    if !run.refines.is_empty() {
        write_episodes(&dir.join("refine.jsonl"), &run.refines)?;
    }
    let summary = serde_json::json!({"policy": policy, "judge": judge, "config": sc, "rows": run.rows});
    let path = dir.join("scaling.json");
    std::fs::write(&path, serde_json::to_string_pretty(&summary)? + "\n").with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

