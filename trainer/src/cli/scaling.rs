//! Test-time scaling options of `fusegrpo eval` and `fusegrpo rollout`
//! (`--attempts N --select ... [--refine] [--judge ...]`): the run through
//! [`rollout::scaling::evaluate`], its table, and its output folder
//! (attempts.jsonl, selection.jsonl, refine.jsonl, scaling.json, scaling.png).

use trainer::files::write_json_lines;
use trainer::rollouts::episodes::write_episodes;
use trainer::rollouts::{http_teacher_config, on_done, progress_bar, with_policy, TeacherOpts};
use trainer::run_config::PolicyChoice;
use anyhow::{bail, Context, Result};
use rollout::scaling::{evaluate, JudgeChoice, ScalingConfig, ScalingRow, ScalingRun, Selector, SummarySource};
use rollout::tasks::Task;
use rollout::teacher::http::HttpTeacher;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;
use trainer::run_config::RunConfig;

/// Who judges tournaments, as given on the command line.
#[derive(Debug, Clone, PartialEq)]
pub enum JudgeSpec {
    /// No model: the attempt whose answer more distinct calls surfaced.
    Evidence,
    /// The policy being evaluated, prompted as a judge.
    Model,
    /// An OpenAI-compatible endpoint.
    Http(String),
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

#[derive(clap::Args, Debug, Clone)]
pub struct ScalingArgs {
    /// Attempts per task: turns on test-time scaling; the selectors are
    /// applied to the first 1, 2, 4, ... of them up to N (one table row each).
    /// Scripted attempts are varied by the config's sampling seed.
    #[arg(long)]
    pub attempts: Option<usize>,
    /// Selectors, comma-separated: first, vote, tournament (default: all three).
    #[arg(long, value_delimiter = ',')]
    pub select: Option<Vec<Selector>>,
    /// One more attempt per task and selector, with the selected attempt's
    /// summary in its prompt; its answer is final (reported beside).
    #[arg(long)]
    pub refine: bool,
    /// Tournament judge: evidence | model (the policy being evaluated) | http://host:port.
    #[arg(long)]
    pub judge: Option<JudgeSpec>,
    /// Votes an entity needs (default: a majority of the attempts that answered).
    #[arg(long)]
    pub vote_min: Option<usize>,
    /// Model name sent to an HTTP judge.
    #[arg(long, default_value = "judge")]
    pub judge_model: String,
    /// Times a judge's malformed answer is asked again before the evidence fallback decides.
    #[arg(long, default_value_t = 2)]
    pub judge_retries: usize,
    /// New tokens of a judge's answer at most.
    #[arg(long, default_value_t = 16)]
    pub judge_max_tokens: usize,
    /// Who writes the summaries judges and refine read: episode (made from
    /// the episode) | judge (written by the model or HTTP judge from the transcript).
    #[arg(long, default_value = "episode")]
    pub summaries: SummarySource,
    /// New tokens of a judge-written summary at most.
    #[arg(long, default_value_t = 160)]
    pub summary_max_tokens: usize,
    /// Folder for attempts.jsonl, summaries.jsonl, selection.jsonl, refine.jsonl, scaling.json and scaling.png.
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
}

impl ScalingArgs {
    /// The scaling settings, or None when `--attempts` is not given (an
    /// error if another scaling option is).
    pub fn config(&self, seed: u64) -> Result<Option<ScalingConfig>> {
        let Some(attempts) = self.attempts else {
            let stray = [
                ("--select", self.select.is_some()),
                ("--refine", self.refine),
                ("--judge", self.judge.is_some()),
                ("--vote-min", self.vote_min.is_some()),
                ("--out-dir", self.out_dir.is_some()),
            ];
            if let Some((name, _)) = stray.iter().find(|(_, given)| *given) {
                bail!("{name} selects among attempts: give --attempts N too");
            }
            return Ok(None);
        };
        let cfg = ScalingConfig {
            attempts,
            selectors: self.select.clone().unwrap_or_else(|| vec![Selector::First, Selector::Vote, Selector::Tournament]),
            refine: self.refine,
            vote_min: self.vote_min,
            seed,
            judge_retries: self.judge_retries,
            judge_max_tokens: self.judge_max_tokens,
            summaries: self.summaries,
            summary_max_tokens: self.summary_max_tokens,
        };
        cfg.validate().map_err(|(key, msg)| anyhow::anyhow!("--{key}: {msg}"))?;
        if self.judge.is_some() && !cfg.selectors.contains(&Selector::Tournament) && cfg.summaries == SummarySource::Episode {
            bail!("--judge decides tournaments: add tournament to --select");
        }
        if cfg.summaries == SummarySource::Judge && matches!(self.judge, None | Some(JudgeSpec::Evidence)) {
            bail!("--summaries judge: the evidence judge writes none; give --judge model or --judge http://...");
        }
        Ok(Some(cfg))
    }
}

/// Runs the attempts and selections of `sc` on `tasks` with `policy`.
pub fn run(
    cfg: &RunConfig,
    tasks: &[Task],
    policy: &PolicyChoice,
    teacher: &TeacherOpts,
    args: &ScalingArgs,
    sc: &ScalingConfig,
) -> Result<ScalingRun> {
    let mut teacher = teacher.clone();
    if *policy == PolicyChoice::Scripted && teacher.vary_scripted.is_none() {
        teacher.vary_scripted = Some(cfg.sampling.seed);
    }
    let judge = args.judge.clone().unwrap_or(JudgeSpec::Evidence);
    with_policy(cfg, policy, &teacher, |policy, env| {
        let refines = if sc.refine { rollout::scaling::sweep(sc.attempts).len() * sc.selectors.len() } else { 0 };
        let bar = progress_bar((tasks.len() * (sc.attempts + refines)) as u64, "episodes");
        let mut http = match &judge {
            JudgeSpec::Http(url) => {
                let http = trainer::rollouts::Endpoint { model: args.judge_model.clone(), ..teacher.http.clone() };
                let opts = TeacherOpts { http, ..teacher.clone() };
                Some(http_judge(cfg, url, &opts)?)
            }
            _ => None,
        };
        let choice = match (&judge, http.as_mut()) {
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

/// Writes the run's files under `dir` (created), and the scaling plot.
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
    super::plot_scaling::draw_dir(dir, None)?;
    Ok(())
}

/// The judge's name for tables and files.
pub fn judge_name(args: &ScalingArgs) -> String {
    match args.judge.clone().unwrap_or(JudgeSpec::Evidence) {
        JudgeSpec::Evidence => "evidence".into(),
        JudgeSpec::Model => "model".into(),
        JudgeSpec::Http(url) => url,
    }
}
