//! `fusegrpo rollout` and `fusegrpo eval`: run episodes for a task set with
//! a policy (our model, the scripted teacher, or an HTTP teacher).

use super::common::{load_model, write_json_lines, RunOn};
use anyhow::{Context, Result};
use rand::SeedableRng;
use rollout::episode::driver::{run_episodes, Env};
use rollout::episode::summary::Summary;
use rollout::episode::Episode;
use rollout::policy::Policy;
use rollout::repo::SnapshotStore;
use rollout::teacher::http::{HttpTeacher, HttpTeacherConfig};
use rollout::teacher::scripted::ScriptedTeacher;
use rollout::tasks::Task;
use rollout::tools::ToolRunner;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use trainer::policy::ModelPolicy;
use trainer::run_config::RunConfig;

/// Which policy writes the assistant turns.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyChoice {
    /// The config's model, sampled with the config's sampling settings.
    Model,
    /// The scripted teacher (no model).
    Scripted,
    /// An OpenAI-compatible chat-completions endpoint (base URL).
    Http(String),
}

impl FromStr for PolicyChoice {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "model" => Ok(PolicyChoice::Model),
            "scripted" => Ok(PolicyChoice::Scripted),
            url if url.starts_with("http://") || url.starts_with("https://") => Ok(PolicyChoice::Http(url.into())),
            other => Err(format!("`{other}`: expected model, scripted or an http(s):// URL")),
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// Run configuration (TOML; see configs/).
    #[arg(long)]
    pub config: PathBuf,
    /// Tasks (JSONL, SWE-bench-style rows).
    #[arg(long)]
    pub tasks: PathBuf,
    /// Episodes (JSONL), one line per episode.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// model | scripted | http://host:port (OpenAI-compatible teacher).
    #[arg(long, default_value = "model")]
    pub policy: PolicyChoice,
    /// Episodes per task (default: the config's rollout.group).
    #[arg(long)]
    pub group: Option<usize>,
    /// Use only the first N tasks.
    #[arg(long)]
    pub max_tasks: Option<usize>,
    /// Model name sent to an HTTP teacher.
    #[arg(long, default_value = "teacher")]
    pub teacher_model: String,
    /// Environment variable holding the HTTP teacher's API key.
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// Bound on requests per second to an HTTP teacher.
    #[arg(long)]
    pub requests_per_second: Option<f64>,
}

/// How to reach (and vary) a teacher policy.
#[derive(Debug, Clone, Default)]
pub struct TeacherOpts {
    /// Model name sent to an HTTP teacher.
    pub model: String,
    /// Environment variable holding the HTTP teacher's API key.
    pub api_key_env: Option<String>,
    /// Bound on requests per second to an HTTP teacher.
    pub requests_per_second: Option<f64>,
    /// Vary the scripted teacher per episode with this seed (synth).
    pub vary_scripted: Option<u64>,
}

/// Run the episodes of `args`; returns them with the config used.
pub fn collect(args: &Args) -> Result<Vec<Episode>> {
    let cfg = RunConfig::from_file(&args.config)?;
    let mut tasks = rollout::tasks::load_tasks(&args.tasks)?;
    if let Some(n) = args.max_tasks {
        tasks.truncate(n);
    }
    let group = args.group.unwrap_or(cfg.rollout.group);
    let teacher = TeacherOpts {
        model: args.teacher_model.clone(),
        api_key_env: args.api_key_env.clone(),
        requests_per_second: args.requests_per_second,
        vary_scripted: None,
    };
    run_policy(&cfg, &tasks, &args.policy, group, &teacher)
}

/// `group` episodes per task of `tasks` with `policy` (the config's model,
/// the scripted teacher or an HTTP teacher), with a progress bar.
pub fn run_policy(cfg: &RunConfig, tasks: &[Task], policy: &PolicyChoice, group: usize, teacher: &TeacherOpts) -> Result<Vec<Episode>> {
    let model_dir = trainer::hub::resolve_model_dir(&cfg.model.path)?;
    let tok_dir = cfg.tokenizer_dir(&model_dir);
    let tok = cfg.chat_tokenizer(&model_dir).with_context(|| format!("tokenizer in {}", tok_dir.display()))?;
    let store = SnapshotStore::open(&cfg.env.repos_dir);
    let tools = ToolRunner::new(cfg.env.tools.clone());
    let env = Env { tokenizer: &tok, store: &store, tools: &tools, reward: &cfg.reward };
    let bar = progress_bar((tasks.len() * group) as u64, "episodes");
    let on_done = |e: &Episode| {
        bar.inc(1);
        bar.set_message(format!("last R={:.3}", e.score.map_or(0.0, |s| s.reward)));
    };
    let episodes = match policy {
        PolicyChoice::Model => {
            let on = RunOn { device: cfg.model.device, dtype: cfg.model.dtype };
            let (model, _) = load_model(&cfg.model.path, &on)?;
            let stop = vec![tok.special().im_end, tok.special().endoftext];
            let rng = rand_chacha::ChaCha8Rng::seed_from_u64(cfg.sampling.seed);
            let mut policy = ModelPolicy::new(&model, cfg.sampling.sampler(), rng, stop, cfg.rollout.limits());
            run(&mut policy, &env, tasks, group, cfg, on_done)?
        }
        PolicyChoice::Scripted => {
            let mut teacher = teacher.vary_scripted.map_or_else(ScriptedTeacher::default, ScriptedTeacher::varied);
            run(&mut teacher, &env, tasks, group, cfg, on_done)?
        }
        PolicyChoice::Http(url) => {
            let mut tcfg = HttpTeacherConfig::new(url.clone(), teacher.model.clone());
            tcfg.temperature = Some(cfg.sampling.temperature);
            tcfg.seed = Some(cfg.sampling.seed);
            tcfg.api_key_env = teacher.api_key_env.clone();
            tcfg.requests_per_second = teacher.requests_per_second;
            let mut teacher = HttpTeacher::new(tcfg).with_context(|| format!("teacher {url}"))?;
            run(&mut teacher, &env, tasks, group, cfg, on_done)?
        }
    };
    bar.finish_and_clear();
    Ok(episodes)
}

fn run(
    policy: &mut dyn Policy,
    env: &Env<'_>,
    tasks: &[Task],
    group: usize,
    cfg: &RunConfig,
    on_done: impl FnMut(&Episode),
) -> Result<Vec<Episode>> {
    Ok(run_episodes(policy, env, tasks, group, &cfg.episode, on_done)?)
}

pub fn progress_bar(len: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!("{{elapsed_precise}} [{{bar:30}}] {{pos}}/{{len}} {what} (eta {{eta}}) {{msg}}"))
            .expect("valid template"),
    );
    bar
}

pub fn run_rollout(args: Args) -> Result<()> {
    let out = args.out.clone().context("--out EPISODES.jsonl is required")?;
    let episodes = collect(&args)?;
    write_episodes(&out, &episodes)?;
    eprintln!("{}\n{}", Summary::HEADER, Summary::of(&episodes).row("rollout"));
    Ok(())
}

pub fn run_eval(args: Args) -> Result<()> {
    let episodes = collect(&args)?;
    if let Some(out) = &args.out {
        write_episodes(out, &episodes)?;
    }
    println!("{}\n{}", Summary::HEADER, Summary::of(&episodes).row("eval"));
    Ok(())
}

/// [`write_episodes`] to `path` atomically (through `path.partial`, folders
/// created): a stage's output never exists half-written, so "the file
/// exists" means "the stage finished".
pub fn write_episodes_atomic(path: &Path, episodes: &[Episode]) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let tmp = path.with_extension("jsonl.partial");
    write_episodes(&tmp, episodes)?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}

/// Episodes as JSONL, with their stop reason, policy tokens, tool calls
/// and mean calls per tool turn spelled out.
pub fn write_episodes(path: &Path, episodes: &[Episode]) -> Result<()> {
    let rows: Vec<serde_json::Value> = episodes
        .iter()
        .map(|e| {
            let mut v = serde_json::to_value(e).expect("episodes serialize");
            v["stop_reason"] = serde_json::to_value(e.stop_reason()).expect("serializes");
            v["policy_tokens"] = e.policy_tokens().into();
            v["tool_calls"] = e.tool_calls().into();
            v["calls_per_turn"] = rollout::episode::filter::calls_per_turn(e).into();
            v
        })
        .collect();
    write_json_lines(path, &rows)
}
