//! Episodes as the commands and the recipe make them (their rollouts): the
//! environment of a run config (tokenizer, repositories, tools, reward),
//! the policy it names (our model on the builtin or the vLLM engine, the
//! scripted teacher, an HTTP teacher), a checked task file, progress, and
//! episode files ([`jsonl`]).

pub mod jsonl;
pub mod issue_cut;
pub mod vllm;

use crate::run_config::{Engine, PolicyChoice, RunConfig};
use crate::error::{Context, Result};
use rand::SeedableRng;
use rollout::episode::driver::{run_episodes, Env};
use rollout::episode::Episode;
use rollout::policy::Policy;
use rollout::repo::SnapshotStore;
use rollout::tasks::Task;
use rollout::teacher::http::{HttpTeacher, HttpTeacherConfig};
use rollout::teacher::guided::{Guide, GuidedTeacher};
use rollout::teacher::scripted::ScriptedTeacher;
use rollout::tools::ToolRunner;
use std::path::Path;

/// How a run reaches an OpenAI-compatible endpoint that plays a teacher, a
/// localizer or a judge: the model name it is sent, the environment
/// variable with its API key, and a bound on requests per second.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub model: String,
    pub api_key_env: Option<String>,
    pub requests_per_second: Option<f64>,
}

impl Default for Endpoint {
    fn default() -> Self {
        Endpoint { model: "teacher".into(), api_key_env: None, requests_per_second: None }
    }
}

impl Endpoint {
    /// `[pipeline]`'s `teacher_model`, `api_key_env` and `requests_per_second`.
    pub fn of_pipeline(p: &crate::run_config::PipelineSection) -> Self {
        Endpoint { model: p.teacher_model.clone(), api_key_env: p.api_key_env.clone(), requests_per_second: p.requests_per_second }
    }

    /// The client settings for the endpoint at `url` (the rest at their defaults).
    pub fn config(&self, url: &str) -> HttpTeacherConfig {
        let mut c = HttpTeacherConfig::new(url.to_string(), self.model.clone());
        c.api_key_env = self.api_key_env.clone();
        c.requests_per_second = self.requests_per_second;
        c
    }
}

/// How to reach (and vary) a teacher policy.
#[derive(Debug, Clone, Default)]
pub struct TeacherOpts {
    /// The endpoint of an HTTP teacher.
    pub http: Endpoint,
    /// Vary the scripted teacher per episode with this seed (synth).
    pub vary_scripted: Option<u64>,
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
    let start = std::time::Instant::now();
    let mut last = start;
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
            // Episodes end in bursts (a batch decodes together), which
            // indicatif's smoothed rate misreads: the ETA is this run's
            // average pace over what is left.
            let left = bar.length().map_or(0, |l| l.saturating_sub(bar.position()));
            let secs = start.elapsed().as_secs_f64();
            let len = bar.length().map_or("?".to_string(), |l| l.to_string());
            crate::progress::say(&format!(
                "{}/{len} episodes, {n} of them in {secs:.0} s (eta {:.0} s), mean R {:.3} over those {n}",
                bar.position(),
                secs / n as f64 * left as f64,
                sum / n as f64
            ));
        }
    }
}

/// Builds the environment of `cfg` and the chosen policy, and hands both to `work`.
pub fn with_policy<T, E: From<crate::error::Error>>(
    cfg: &RunConfig,
    policy: &PolicyChoice,
    teacher: &TeacherOpts,
    work: impl FnOnce(&mut dyn Policy, &Env<'_>) -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    with_env(cfg, |env| with_policy_in(cfg, env, policy, teacher, work))
}

/// The environment of `cfg` (tokenizer, repositories, tools, reward), handed to `work`.
pub fn with_env<T, E: From<crate::error::Error>>(cfg: &RunConfig, work: impl FnOnce(&Env<'_>) -> std::result::Result<T, E>) -> std::result::Result<T, E> {
    let model_dir = tokenizer_home(cfg)?;
    let tok_dir = cfg.tokenizer_dir(&model_dir);
    let tok = cfg.chat_tokenizer(&model_dir).with_context(|| format!("tokenizer in {}", tok_dir.display()))?;
    let store = SnapshotStore::open(&cfg.env.repos_dir);
    let tools = ToolRunner::new(cfg.env.tools.clone()).with_search(cfg.search.clone(), rollout::search::IndexCache::shared());
    work(&Env { tokenizer: &tok, store: &store, tools: &tools, reward: &cfg.reward })
}

/// The folder whose tokenizer the run reads unless `[model] tokenizer`
/// names one: the model folder; when that is missing, the adapter's folder
/// if it holds the base model's tokenizer (the shipped localizer's does),
/// so that a policy that loads no model (`scripted`, `search`) needs no
/// model folder. A missing model folder with neither is an error that
/// says how to get it.
fn tokenizer_home(cfg: &RunConfig) -> Result<std::path::PathBuf> {
    match lm::hub::resolve_model_dir(&cfg.model.path) {
        Ok(dir) => Ok(dir),
        Err(_) if cfg.model.tokenizer.is_some() => Ok(Default::default()),
        Err(e) => match cfg.model.adapter.as_ref().filter(|a| a.join("tokenizer.json").is_file()) {
            Some(adapter) => Ok(adapter.clone()),
            None => Err(missing_model(cfg, e.into())),
        },
    }
}

/// `e` (a failed load of the config's model), with how to get the model
/// when its folder is missing.
pub fn missing_model(cfg: &RunConfig, e: crate::error::Error) -> crate::error::Error {
    let path = Path::new(&cfg.model.path);
    if path.exists() || lm::hub::is_hub_id(&cfg.model.path) {
        return e;
    }
    e.context(format!(
        "the model folder {} does not exist: scripts/fetch-smollm2.sh fetches the shipped localizer's base model (SmolLM2-135M-Instruct) to ~/.cache/fusegrpo/smollm2-135m-instruct; \
         or give another with --model (policies `search` and `scripted` need no model)",
        path.display()
    ))
}

fn with_policy_in<T, E: From<crate::error::Error>>(
    cfg: &RunConfig,
    env: &Env<'_>,
    policy: &PolicyChoice,
    teacher: &TeacherOpts,
    work: impl FnOnce(&mut dyn Policy, &Env<'_>) -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    let tok = env.tokenizer;
    match policy {
        PolicyChoice::Model if cfg.rollout.engine == Engine::Vllm => {
            let mut engine = vllm::engine(cfg, tok)?;
            work(&mut engine, env)
        }
        PolicyChoice::Model => {
            let (model, _) = crate::model_policy::load::load_model(&cfg.model.path, cfg.model.adapter.as_deref(), &cfg.model.placement())
                .map_err(|e| missing_model(cfg, e))?;
            let stop = tok.stop_ids().to_vec();
            let rng = rand_chacha::ChaCha8Rng::seed_from_u64(cfg.sampling.seed);
            // Every prompt opens with the same system prompt and tool
            // schemas: prefilled once, for every episode of every call.
            let prefix = rollout::episode::driver::fixed_prefix(tok, &cfg.episode, &cfg.env.tools).map_err(crate::error::Error::from)?;
            let mut policy = crate::model_policy::ModelPolicy::new(&model, cfg.sampling.sampler(), rng, stop, cfg.rollout.limits()).with_prefix(prefix);
            work(&mut policy, env)
        }
        PolicyChoice::Scripted => {
            let mut teacher = teacher.vary_scripted.map_or_else(ScriptedTeacher::default, ScriptedTeacher::varied);
            work(&mut teacher, env)
        }
        PolicyChoice::Guided => {
            let guide = Guide::new(env.tools.indexes.clone(), cfg.search.clone());
            let mut teacher = GuidedTeacher::new(teacher.vary_scripted.map_or_else(ScriptedTeacher::default, ScriptedTeacher::varied), guide);
            work(&mut teacher, env)
        }
        PolicyChoice::Http(url) => {
            let mut teacher = http_teacher(cfg, url, teacher)?;
            work(&mut teacher, env)
        }
    }
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


/// The tasks of `path`, every one checked before anything large loads:
/// its repository under `[env] repos_dir`, its base commit, a non-empty
/// gold, and a prompt that fits `[episode] max_total_tokens`. All bad rows
/// are reported at once (file:line, reason); with `skip_bad` they are
/// dropped with a count instead.
pub fn checked_tasks(path: &Path, cfg: &RunConfig, skip_bad: bool) -> Result<Vec<Task>> {
    let repos = &cfg.env.repos_dir;
    crate::error::ensure!(repos.is_dir(), "[env] repos_dir {} is not a folder (the task file {} needs its repositories there: `fusegrpo repos fetch`)", repos.display(), path.display());
    let model_dir = lm::hub::resolve_model_dir(&cfg.model.path)?;
    let tok = cfg.chat_tokenizer(&model_dir).with_context(|| format!("tokenizer in {}", cfg.tokenizer_dir(&model_dir).display()))?;
    let limit = cfg.episode.max_total_tokens;
    let fits = |task: &Task| match rollout::episode::driver::prompt_tokens(&tok, task, &cfg.episode, &cfg.env.tools) {
        Ok((_, ids)) if ids.len() >= limit => Some(format!("its prompt is {} tokens, [episode] max_total_tokens = {limit} leaves no room for a turn", ids.len())),
        Ok(_) => None,
        Err(e) => Some(format!("rendering its prompt: {e}")),
    };
    checked_with(path, cfg, skip_bad, &fits)
}

/// [`checked_tasks`] with its own test of whether a task's prompt fits
/// (`fits`: `None`, or why not).
pub(crate) fn checked_with(path: &Path, cfg: &RunConfig, skip_bad: bool, fits: &dyn Fn(&Task) -> Option<String>) -> Result<Vec<Task>> {
    let repos = &cfg.env.repos_dir;
    let limit = cfg.episode.max_total_tokens;
    let checked = rollout::tasks::check::check_task_file(path, repos, fits)?;
    let total = checked.good.len() + checked.bad.len();
    crate::error::ensure!(total > 0, "{}: no tasks", path.display());
    if checked.bad.is_empty() {
        return Ok(checked.tasks());
    }
    if checked.good.is_empty() && checked.bad.iter().all(|b| b.reason.contains("max_total_tokens")) {
        let shortest = checked.bad.iter().map(|b| b.reason.clone()).min_by_key(|r| r.len()).unwrap_or_default();
        crate::error::bail!("config key `episode.max_total_tokens`: {limit} is below every task's prompt in {} (e.g. {shortest})", path.display());
    }
    let list = checked.report();
    if skip_bad {
        for line in list.lines() {
            crate::progress::say(line);
        }
        crate::progress::say(&format!("--skip-bad-tasks: dropped {} of {total} tasks in {}; {} remain", checked.bad.len(), path.display(), checked.good.len()));
        crate::error::ensure!(!checked.good.is_empty(), "{}: no task can run", path.display());
        return Ok(checked.tasks());
    }
    crate::error::bail!("{} of {total} tasks in {} cannot run:\n{list}nothing was started; fix them, or pass --skip-bad-tasks to drop them", checked.bad.len(), path.display())
}
