//! `fusegrpo rollout` and `fusegrpo eval`: run episodes for a task set with
//! a policy (our model, the scripted teacher, or an HTTP teacher).

use super::common::{load_model, write_json_lines, RunOn};
use anyhow::{Context, Result};
use rand::SeedableRng;
use rollout::chat::ChatTokenizer;
use rollout::engine::vllm::{VllmConfig, VllmEngine};
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
use trainer::policy::ModelPolicy;
pub use super::common::HttpTeacherArgs;
pub use trainer::run_config::PolicyChoice;
use trainer::run_config::{Engine, RunConfig};

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
    /// The model (a folder, a checkpoint or a hub id) instead of the config's [model] path.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// A LoRA adapter instead of the config's [model] adapter (PEFT's folder,
    /// or a LoRA run's checkpoint).
    #[arg(long, conflicts_with = "no_adapter")]
    pub adapter: Option<PathBuf>,
    /// The base model alone: no adapter, whatever the config's [model] adapter says.
    #[arg(long)]
    pub no_adapter: bool,
    /// Sampling temperature instead of the config's [sampling] temperature (0: greedy).
    #[arg(long)]
    pub temperature: Option<f64>,
    /// The repositories' folder instead of the config's [env] repos_dir.
    #[arg(long)]
    pub repos_dir: Option<PathBuf>,
    /// Use only the first N tasks.
    #[arg(long)]
    pub max_tasks: Option<usize>,
    #[command(flatten)]
    pub http: HttpTeacherArgs,
    #[command(flatten)]
    pub scaling: super::scaling::ScalingArgs,
    #[command(flatten)]
    pub tasks_check: super::common::TaskCheckArgs,
}

/// How to reach (and vary) a teacher policy.
#[derive(Debug, Clone, Default)]
pub struct TeacherOpts {
    /// The endpoint of an HTTP teacher.
    pub http: HttpTeacherArgs,
    /// Vary the scripted teacher per episode with this seed (synth).
    pub vary_scripted: Option<u64>,
}

/// The config, tasks and teacher options of `args`.
fn inputs(args: &Args) -> Result<(RunConfig, Vec<Task>, TeacherOpts)> {
    let mut cfg = RunConfig::from_file(&args.config)?;
    if let Some(model) = &args.model {
        cfg.model.path = model.to_string_lossy().into_owned();
    }
    if let Some(dir) = &args.repos_dir {
        cfg.env.repos_dir = dir.clone();
    }
    if let Some(adapter) = &args.adapter {
        cfg.model.adapter = Some(adapter.clone());
    }
    if args.no_adapter {
        cfg.model.adapter = None;
    }
    if let Some(t) = args.temperature {
        anyhow::ensure!(t >= 0.0 && t.is_finite(), "--temperature {t}: must be >= 0 (0: greedy)");
        cfg.sampling.temperature = t;
    }
    anyhow::ensure!(args.group != Some(0), "--group 0: at least 1 episode per task");
    anyhow::ensure!(args.max_tasks != Some(0), "--max-tasks 0: at least 1 task");
    let mut tasks = super::common::checked_tasks(&args.tasks, &cfg, args.tasks_check.skip_bad_tasks)?;
    if let Some(n) = args.max_tasks {
        tasks.truncate(n);
    }
    let teacher = TeacherOpts { http: args.http.clone(), vary_scripted: None };
    Ok((cfg, tasks, teacher))
}

/// Runs the episodes of `args` (or, with `--attempts`, the attempts and
/// their selections), prints the table, writes what was asked.
fn run_args(args: &Args, label: &str, out_required: bool) -> Result<()> {
    let (cfg, tasks, teacher) = inputs(args)?;
    if let Some(sc) = args.scaling.config(cfg.sampling.seed)? {
        anyhow::ensure!(args.group.is_none(), "--group and --attempts both set the episodes per task: give one");
        anyhow::ensure!(
            !out_required || args.out.is_some() || args.scaling.out_dir.is_some(),
            "--out ATTEMPTS.jsonl or --out-dir DIR is required"
        );
        let run = super::scaling::run(&cfg, &tasks, &args.policy, &teacher, &args.scaling, &sc)?;
        if let Some(out) = &args.out {
            write_episodes(out, &run.attempts)?;
        }
        let judge = super::scaling::judge_name(&args.scaling);
        if let Some(dir) = &args.scaling.out_dir {
            let policy = policy_name(&args.policy);
            super::scaling::write_dir(dir, &run, &sc, &policy, &judge)?;
            eprintln!("{label}: attempts, selections and scaling.json/png in {}", dir.display());
        }
        print!("{}", super::scaling::report(&run, &judge));
        return Ok(());
    }
    let out = if out_required { Some(args.out.clone().context("--out EPISODES.jsonl is required")?) } else { args.out.clone() };
    let group = args.group.unwrap_or(cfg.rollout.group);
    let episodes = run_policy(&cfg, &tasks, &args.policy, group, &teacher)?;
    if let Some(out) = &out {
        write_episodes(out, &episodes)?;
    }
    let table = format!("{}\n{}", Summary::HEADER, Summary::of(&episodes).row(label));
    if out_required {
        eprintln!("{table}");
    } else {
        println!("{table}");
    }
    Ok(())
}

fn policy_name(p: &PolicyChoice) -> String {
    match p {
        PolicyChoice::Model => "model".into(),
        PolicyChoice::Scripted => "scripted".into(),
        PolicyChoice::Http(url) => url.clone(),
    }
}

/// `group` episodes per task of `tasks` with `policy` (the config's model,
/// the scripted teacher or an HTTP teacher), with a progress bar.
pub fn run_policy(cfg: &RunConfig, tasks: &[Task], policy: &PolicyChoice, group: usize, teacher: &TeacherOpts) -> Result<Vec<Episode>> {
    with_policy(cfg, policy, teacher, |policy, env| {
        let bar = progress_bar((tasks.len() * group) as u64, "episodes");
        let episodes = run_episodes(policy, env, tasks, group, &cfg.episode, on_done(&bar))?;
        bar.finish_and_clear();
        Ok(episodes)
    })
}

/// Advances `bar` and shows the last reward as each episode ends.
pub fn on_done(bar: &indicatif::ProgressBar) -> impl FnMut(&Episode) + '_ {
    // indicatif draws nothing when stderr is no terminal (nohup, a log
    // file, a pipeline's log): there a plain line a minute, and one at the end.
    let plain = !std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut last = std::time::Instant::now();
    let (mut n, mut sum) = (0usize, 0f64);
    move |e: &Episode| {
        let r = e.score.map_or(0.0, |s| s.reward);
        bar.inc(1);
        bar.set_message(format!("last R={r:.3}"));
        n += 1;
        sum += r;
        let end = bar.length().is_some_and(|l| bar.position() >= l);
        if plain && (end || last.elapsed().as_secs() >= 60) {
            last = std::time::Instant::now();
            let len = bar.length().map_or("?".to_string(), |l| l.to_string());
            eprintln!(
                "{}/{len} episodes in {:.0} s (eta {:.0} s), mean R {:.3} over the {n} of this run",
                bar.position(),
                bar.elapsed().as_secs_f64(),
                bar.eta().as_secs_f64(),
                sum / n as f64
            );
        }
    }
}

/// Builds the environment of `cfg` and the chosen policy, and hands both to `work`.
pub fn with_policy<T>(
    cfg: &RunConfig,
    policy: &PolicyChoice,
    teacher: &TeacherOpts,
    work: impl FnOnce(&mut dyn Policy, &Env<'_>) -> Result<T>,
) -> Result<T> {
    with_env(cfg, |env| with_policy_in(cfg, env, policy, teacher, work))
}

/// The environment of `cfg` (tokenizer, repositories, tools, reward), handed to `work`.
pub fn with_env<T>(cfg: &RunConfig, work: impl FnOnce(&Env<'_>) -> Result<T>) -> Result<T> {
    let model_dir = trainer::hub::resolve_model_dir(&cfg.model.path)?;
    let tok_dir = cfg.tokenizer_dir(&model_dir);
    let tok = cfg.chat_tokenizer(&model_dir).with_context(|| format!("tokenizer in {}", tok_dir.display()))?;
    let store = SnapshotStore::open(&cfg.env.repos_dir);
    let tools = ToolRunner::new(cfg.env.tools.clone());
    work(&Env { tokenizer: &tok, store: &store, tools: &tools, reward: &cfg.reward })
}

fn with_policy_in<T>(
    cfg: &RunConfig,
    env: &Env<'_>,
    policy: &PolicyChoice,
    teacher: &TeacherOpts,
    work: impl FnOnce(&mut dyn Policy, &Env<'_>) -> Result<T>,
) -> Result<T> {
    let tok = env.tokenizer;
    match policy {
        PolicyChoice::Model if cfg.rollout.engine == Engine::Vllm => {
            let mut engine = vllm_engine(cfg, tok)?;
            work(&mut engine, env)
        }
        PolicyChoice::Model => {
            let on = RunOn { device: cfg.model.device, dtype: cfg.model.dtype, cuda_kernels: cfg.model.cuda_kernels };
            let (model, _) = load_model(&cfg.model.path, cfg.model.adapter.as_deref(), &on)?;
            let stop = vec![tok.special().im_end, tok.special().endoftext];
            let rng = rand_chacha::ChaCha8Rng::seed_from_u64(cfg.sampling.seed);
            let mut policy = ModelPolicy::new(&model, cfg.sampling.sampler(), rng, stop, cfg.rollout.limits());
            work(&mut policy, env)
        }
        PolicyChoice::Scripted => {
            let mut teacher = teacher.vary_scripted.map_or_else(ScriptedTeacher::default, ScriptedTeacher::varied);
            work(&mut teacher, env)
        }
        PolicyChoice::Http(url) => {
            let mut teacher = http_teacher(cfg, url, teacher)?;
            work(&mut teacher, env)
        }
    }
}

/// The vLLM engine of `[rollout.vllm]`, checked: it serves the configured
/// model, and returns the sampled distribution's log-probs.
pub fn vllm_engine(cfg: &RunConfig, tok: &ChatTokenizer) -> Result<VllmEngine> {
    let (mut engine, probe) = vllm_connect(cfg, tok)?;
    let info = engine.check()?;
    let (mean, max) = same_model(cfg, &mut engine, &probe)?;
    eprintln!(
        "rollouts on vLLM at {} ({}, context {}); its log-probs of a {}-token probe against this config's model: mean |diff| {mean:.2e}, max {max:.2e}",
        engine.base(),
        engine.model(),
        info.max_model_len.map_or("unknown".to_string(), |n| n.to_string()),
        probe.len()
    );
    Ok(engine)
}

/// GRPO's rollouts on the vLLM engine of `[rollout.vllm]`, kept in step
/// with the weights being trained (`trainer::grpo::engine`): each sync's
/// folder goes under `run_dir/engine-weights` (the server must read it).
pub fn vllm_training_engine(cfg: &RunConfig, tok: &ChatTokenizer, run_dir: &Path) -> Result<trainer::trainers::grpo::engine::EngineSync> {
    let (engine, probe) = vllm_connect(cfg, tok)?;
    let v = cfg.rollout.vllm.as_ref().expect("vllm_connect checked the section");
    let dir = std::path::absolute(run_dir.join("engine-weights")).with_context(|| format!("{}", run_dir.display()))?;
    eprintln!("rollouts on vLLM at {} ({}): the weights are synced to it before each step (folders in {})", engine.base(), v.served_model, dir.display());
    Ok(trainer::trainers::grpo::engine::EngineSync::new(engine, dir, probe, v.probe_tolerance, cfg.sampling.seed))
}

/// The vLLM engine of `[rollout.vllm]`, its model listed and its log-probs
/// the sampled distribution's, and the probe's tokens.
fn vllm_connect(cfg: &RunConfig, tok: &ChatTokenizer) -> Result<(VllmEngine, Vec<u32>)> {
    let v = cfg.rollout.vllm.as_ref().context("[rollout] engine = \"vllm\" needs a [rollout.vllm] section")?;
    let engine = VllmEngine::new(VllmConfig {
        url: v.url.clone(),
        served_model: v.served_model.clone(),
        temperature: cfg.sampling.temperature,
        top_p: cfg.sampling.top_p,
        seed: cfg.sampling.seed,
        stop_token_ids: vec![tok.special().im_end, tok.special().endoftext],
        max_concurrency: v.max_concurrency,
        timeout: std::time::Duration::from_secs_f64(v.timeout_s),
        retry: rollout::http::Retry {
            max_retries: v.max_retries,
            initial_backoff: std::time::Duration::from_millis(500),
            max_backoff: std::time::Duration::from_secs(30),
        },
    })?;
    engine.check()?;
    let probe = tok.encode(VLLM_PROBE).context("tokenizing the engine's probe")?;
    engine.check_processed_logprobs(&probe)?;
    Ok((engine, probe))
}

/// The text whose log-probs the engine and this config's model must agree
/// on (a code-and-issue sentence, some 40 tokens).
const VLLM_PROBE: &str = "Issue: calling parse_config() with an empty file raises KeyError instead of returning the defaults.\n\ndef parse_config(path):\n    with open(path) as f:";

/// The engine serves this config's model (`[model] path` and `adapter`):
/// the mean |difference| of the probe's log-probs, ours against the
/// engine's, at most `[rollout.vllm] probe_tolerance`. With `load_model`,
/// a server that serves something else first gets this config's model (the
/// adapter loaded under a name of its own, or the weights reloaded in
/// place). Returns the mean and the max.
fn same_model(cfg: &RunConfig, engine: &mut VllmEngine, probe: &[u32]) -> Result<(f64, f64)> {
    let on = RunOn { device: cfg.model.device, dtype: cfg.model.dtype, cuda_kernels: cfg.model.cuda_kernels };
    let (model, _) = load_model(&cfg.model.path, cfg.model.adapter.as_deref(), &on)?;
    let ours: Vec<f32> = trainer::logprobs::score_sequence(&model, probe)?.into_iter().skip(1).map(|l| l.unwrap_or(f32::NAN)).collect();
    drop(model);
    let v = cfg.rollout.vllm.as_ref().context("[rollout.vllm]")?;
    let (mut mean, mut max) = trainer::trainers::grpo::engine::mean_max_abs_diff(&ours, &engine.prompt_logprobs(probe)?);
    if mean > v.probe_tolerance && v.load_model {
        load_config_model(cfg, engine)?;
        (mean, max) = trainer::trainers::grpo::engine::mean_max_abs_diff(&ours, &engine.prompt_logprobs(probe)?);
    }
    anyhow::ensure!(
        mean <= v.probe_tolerance,
        "vllm engine at {}: serves another model than this config's ({}{}): the log-probs of a {}-token probe differ by {mean:.4} on average (max {max:.4}; [rollout.vllm] probe_tolerance = {}). Serve that model (and the adapter, as served_model), point [model] at what the server has, or set [rollout.vllm] load_model = true to load it onto the server",
        engine.base(),
        cfg.model.path,
        cfg.model.adapter.as_ref().map_or(String::new(), |a| format!(" with adapter {}", a.display())),
        probe.len(),
        v.probe_tolerance
    );
    Ok((mean, max))
}

/// `[rollout.vllm] load_model`: this config's adapter onto the server under
/// a name of its own (a hash of its folder), or, without an adapter, its
/// model's weights reloaded in place (a tied head from an untied view).
fn load_config_model(cfg: &RunConfig, engine: &mut VllmEngine) -> Result<()> {
    use std::hash::{Hash, Hasher};
    match &cfg.model.adapter {
        Some(adapter) => {
            let dir = std::path::absolute(adapter).with_context(|| format!("{}", adapter.display()))?;
            let mut h = std::collections::hash_map::DefaultHasher::new();
            dir.hash(&mut h);
            let name = format!("fusegrpo-{:016x}", h.finish());
            eprintln!("vllm engine at {}: loading the adapter {} as {name}", engine.base(), dir.display());
            match engine.load_adapter(&name, &dir) {
                // An earlier stage loaded this folder (the name is its
                // path's hash); the probe below checks it is the same.
                Err(e) if e.to_string().contains("already been loaded") => engine.use_adapter(&name),
                r => r?,
            }
        }
        None => {
            let dir = std::path::absolute(trainer::hub::resolve_model_dir(&cfg.model.path)?)?;
            let root = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from).join(".cache/fusegrpo/vllm-untied");
            let folder = trainer::weights::untied_view(&dir, &root)?.unwrap_or(dir.clone());
            eprintln!("vllm engine at {}: reloading its weights from {}", engine.base(), folder.display());
            engine.use_base();
            engine.reload_weights(&folder)?;
        }
    }
    Ok(())
}

/// The HTTP teacher at `url`, sampling as the config says.
pub fn http_teacher(cfg: &RunConfig, url: &str, teacher: &TeacherOpts) -> Result<HttpTeacher> {
    HttpTeacher::new(http_teacher_config(cfg, url, teacher)).with_context(|| format!("teacher {url}"))
}

/// The settings of an HTTP teacher at `url`.
pub fn http_teacher_config(cfg: &RunConfig, url: &str, teacher: &TeacherOpts) -> HttpTeacherConfig {
    let mut tcfg = teacher.http.config(url);
    tcfg.temperature = Some(cfg.sampling.temperature);
    tcfg.seed = Some(cfg.sampling.seed);
    tcfg
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
    run_args(&args, "rollout", true)
}

pub fn run_eval(args: Args) -> Result<()> {
    run_args(&args, "eval", false)
}

/// [`write_episodes`] to `path` with its folders created. Atomic (through
/// `path.partial`): a stage's output never exists half-written, so "the
/// file exists" means "the stage finished".
pub fn write_episodes_atomic(path: &Path, episodes: &[Episode]) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    write_episodes(path, episodes)
}

/// Episodes as JSONL (atomically, [`write_json_lines`]), with their stop reason, policy tokens, tool calls
/// and mean calls per tool turn spelled out.
pub fn write_episodes(path: &Path, episodes: &[Episode]) -> Result<()> {
    let rows: Vec<serde_json::Value> = episodes.iter().map(episode_row).collect();
    write_json_lines(path, &rows)
}

/// One episode's output line: the episode with its stop reason, policy
/// tokens, tool calls and mean calls per tool turn spelled out.
pub fn episode_row(e: &Episode) -> serde_json::Value {
    let mut v = serde_json::to_value(e).expect("episodes serialize");
    v["stop_reason"] = serde_json::to_value(e.stop_reason()).expect("serializes");
    v["policy_tokens"] = e.policy_tokens().into();
    v["tool_calls"] = e.tool_calls().into();
    v["calls_per_turn"] = rollout::episode::filter::calls_per_turn(e).into();
    v
}

/// Episodes of `policy` on `tasks` (`group` each) into `out`, resumable:
/// `chunk` tasks at a time (which also bounds the rollout's memory), each
/// chunk appended to `<out>.chunks` as it ends. A rerun reads the partial
/// file's whole chunks back (a torn last line is dropped), checks they are
/// these tasks', and continues after them; `out` appears (renamed) when all
/// are done, and is read back when it exists. A first interrupt stops after
/// the chunk in progress (exit 130, nothing lost).
pub fn run_policy_resumable(
    cfg: &RunConfig,
    tasks: &[Task],
    policy: &PolicyChoice,
    group: usize,
    teacher: &TeacherOpts,
    chunk: usize,
    out: &Path,
) -> Result<Vec<Episode>> {
    if out.exists() {
        return super::sft::read_episodes(out);
    }
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let partial = PathBuf::from(format!("{}.chunks", out.display()));
    let chunk = chunk.max(1);
    let mut done = read_whole_chunks(&partial, tasks, group, chunk)?;
    if !done.is_empty() {
        eprintln!("{}: {} of {} episodes done before, continuing", partial.display(), done.len(), tasks.len() * group);
    }
    let stop = super::common::interrupt_flag()?;
    with_policy(cfg, policy, teacher, |policy, env| {
        let bar = progress_bar((tasks.len() * group) as u64, "episodes");
        bar.set_position(done.len() as u64);
        for piece in tasks[done.len() / group..].chunks(chunk) {
            let episodes = run_episodes(policy, env, piece, group, &cfg.episode, on_done(&bar))?;
            let mut text = String::new();
            for e in &episodes {
                text += &serde_json::to_string(&episode_row(e))?;
                text.push('\n');
            }
            let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&partial).with_context(|| format!("opening {}", partial.display()))?;
            std::io::Write::write_all(&mut file, text.as_bytes()).with_context(|| format!("appending to {}", partial.display()))?;
            file.sync_data().with_context(|| format!("syncing {}", partial.display()))?;
            done.extend(episodes);
            if stop.load(std::sync::atomic::Ordering::SeqCst) && done.len() < tasks.len() * group {
                bar.abandon();
                return Err(super::common::Interrupted(format!(
                    "interrupted: {} of {} episodes kept in {}; run the same command again to continue",
                    done.len(),
                    tasks.len() * group,
                    partial.display()
                ))
                .into());
            }
        }
        bar.finish_and_clear();
        Ok(())
    })?;
    write_episodes_atomic(out, &done)?;
    std::fs::remove_file(&partial).with_context(|| format!("removing {}", partial.display()))?;
    Ok(done)
}

/// The whole chunks of a partial episode file (see [`run_policy_resumable`]),
/// rewritten without what follows them; empty when there is no file.
fn read_whole_chunks(partial: &Path, tasks: &[Task], group: usize, chunk: usize) -> Result<Vec<Episode>> {
    let Ok(text) = std::fs::read_to_string(partial) else { return Ok(Vec::new()) };
    let mut episodes: Vec<Episode> = Vec::new();
    let lines = text.lines().filter(|l| !l.trim().is_empty()).count();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Episode>(line) {
            Ok(e) => episodes.push(e),
            Err(_) => break,
        }
    }
    let per_chunk = chunk * group;
    let whole = (episodes.len() / per_chunk * per_chunk).min(tasks.len() * group);
    let whole = if episodes.len() >= tasks.len() * group { tasks.len() * group } else { whole };
    episodes.truncate(whole);
    for (i, e) in episodes.iter().enumerate() {
        let task = &tasks[i / group];
        anyhow::ensure!(
            e.task_id == task.instance_id,
            "{}: episode {} is of task '{}' but the tasks now give '{}' there: the task list changed since it was written; remove the file to start over",
            partial.display(),
            i + 1,
            e.task_id,
            task.instance_id
        );
    }
    if whole < lines {
        let kept: Vec<serde_json::Value> = episodes.iter().map(episode_row).collect();
        write_json_lines(partial, &kept)?;
    }
    Ok(episodes)
}
