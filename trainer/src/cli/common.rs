//! Helpers shared by subcommands: model loading and JSONL input/output.

use anyhow::{Context, Result};
use candle_core::Device;
use std::io::{BufRead, Write};
use std::path::Path;
use trainer::device::{DTypeKind, DeviceKind};
use trainer::gpu_check::CudaKernels;
use trainer::CausalLm;

/// Where and in which precision a model runs.
#[derive(clap::Args, Debug, Clone)]
pub struct RunOn {
    /// Device to run on.
    #[arg(long, value_enum, default_value_t = DeviceKind::Cpu)]
    pub device: DeviceKind,
    /// Weights/activations dtype (checkpoint weights are converted to it).
    #[arg(long, value_enum, default_value_t = DTypeKind::F32)]
    pub dtype: DTypeKind,
    /// The fused CUDA kernels with --device cuda: auto (on once
    /// scripts/gpu-check has passed for this build), on or off.
    #[arg(long, value_enum, default_value_t = CudaKernels::Auto)]
    pub cuda_kernels: CudaKernels,
}

impl RunOn {
    /// Opens the device, the CUDA kernels switched as `cuda_kernels` says.
    pub fn open(&self) -> Result<Device> {
        Ok(trainer::device::open_with_kernels(self.device, self.cuda_kernels)?)
    }
}

/// Copy `tokenizer.json` and `tokenizer_config.json` from `from` into `to`.
/// A missing file is an error naming it when `required` (init-tiny's
/// `--tokenizer`), and skipped otherwise (a checkpoint of a model saved
/// without one).
pub fn copy_tokenizer(from: &Path, to: &Path, required: bool) -> Result<()> {
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        let src = from.join(f);
        if required || src.exists() {
            std::fs::copy(&src, to.join(f)).with_context(|| format!("copying {} into {}", src.display(), to.display()))?;
        }
    }
    Ok(())
}

/// Put `template`'s text in `dir/tokenizer_config.json` as its `chat_template`,
/// so a checkpoint trained with `[model] chat_template` carries it.
pub fn set_chat_template(dir: &Path, template: &Path) -> Result<()> {
    let path = dir.join("tokenizer_config.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut config: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{}: invalid JSON", path.display()))?;
    let src = std::fs::read_to_string(template).with_context(|| format!("reading the chat template {}", template.display()))?;
    config["chat_template"] = src.into();
    let tmp = dir.join("tokenizer_config.json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(&config)? + "\n").with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))
}

/// Load a model from a folder or hub id, with an adapter: `adapter`, or
/// the model folder itself when it is one (a LoRA run's checkpoint, whose
/// base its adapter_config.json names).
pub fn load_model(spec: &str, adapter: Option<&Path>, on: &RunOn) -> Result<(CausalLm, Device)> {
    let device = on.open()?;
    let spec = trainer::lora::resolve(spec, adapter)?;
    let t0 = std::time::Instant::now();
    let model = trainer::model::load::load_model(&spec, on.dtype.into(), &device)?;
    let adapter = spec.adapter.as_ref().map_or("none".to_string(), |a| a.display().to_string());
    tracing::info!(model = %spec.base.display(), %adapter, params = trainer::params::parameter_count(model.config()), secs = t0.elapsed().as_secs_f64(), "loaded");
    Ok((model, device))
}

/// `--adapter DIR` of the commands that run a model.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct AdapterArg {
    /// A LoRA adapter to apply (PEFT's folder, or a LoRA run's checkpoint).
    #[arg(long)]
    pub adapter: Option<std::path::PathBuf>,
}

/// Read `{"ids": [...]}` lines, each id below `vocab`, or `{"text": "..."}`
/// lines encoded with `tokenizer` (special tokens written in the text stay
/// whole; none added); errors name the file and line.
pub fn read_input_lines(path: &Path, vocab: usize, tokenizer: Option<&tokenizers::Tokenizer>) -> Result<Vec<Vec<u32>>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut out = Vec::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("{}:{}: reading", path.display(), n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Row {
            ids: Option<Vec<u32>>,
            text: Option<String>,
        }
        let expected = if tokenizer.is_some() { "{\"ids\": [non-negative integers]} or {\"text\": \"...\"}" } else { "{\"ids\": [non-negative integers]}" };
        let where_ = || format!("{}:{}", path.display(), n + 1);
        let row: Row = serde_json::from_str(&line).with_context(|| format!("{}: expected {expected}", where_()))?;
        let ids = match (row.ids, row.text, tokenizer) {
            (Some(ids), None, _) => ids,
            (None, Some(text), Some(tok)) => tok
                .encode(text.as_str(), false)
                .map_err(|e| anyhow::anyhow!("{}: tokenizing the text: {e}", where_()))?
                .get_ids()
                .to_vec(),
            (None, Some(_), None) => anyhow::bail!("{}: a `text` line needs the model's tokenizer.json", where_()),
            _ => anyhow::bail!("{}: expected {expected}", where_()),
        };
        if let Some(bad) = ids.iter().find(|&&t| t as usize >= vocab) {
            anyhow::bail!("{}: token id {bad} is outside the vocabulary (size {vocab})", where_());
        }
        out.push(ids);
    }
    Ok(out)
}

/// The model folder's tokenizer.json, when it has one.
pub fn model_tokenizer(spec: &str) -> anyhow::Result<Option<tokenizers::Tokenizer>> {
    let mut path = trainer::hub::resolve_model_dir(spec)?.join("tokenizer.json");
    if !path.exists() {
        // An adapter folder without a tokenizer: its base's.
        path = trainer::lora::resolve(spec, None)?.base.join("tokenizer.json");
    }
    if !path.exists() {
        return Ok(None);
    }
    tokenizers::Tokenizer::from_file(&path).map(Some).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Write one JSON value per line, atomically: into `path.partial`, then
/// renamed over `path`, so a failure (or a run with nothing to write that
/// fails before) never leaves `path` emptied or half-written.
pub fn write_json_lines<T: serde::Serialize>(path: &Path, rows: &[T]) -> Result<()> {
    write_through_partial(path, |w| {
        for row in rows {
            serde_json::to_writer(&mut *w, row)?;
            w.write_all(b"\n")?;
        }
        Ok(())
    })
}

/// `bytes` into `path` through a temporary sibling renamed into place.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_through_partial(path, |w| Ok(w.write_all(bytes)?))
}

/// `write` streams into `path.partial` (buffered), which is then renamed
/// over `path`: a failure leaves `path` as it was.
fn write_through_partial(path: &Path, write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> Result<()>) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = std::path::PathBuf::from(tmp);
    let file = std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let mut w = std::io::BufWriter::new(file);
    write(&mut w).and_then(|_| Ok(w.flush()?)).with_context(|| format!("writing {}", tmp.display()))?;
    drop(w);
    std::fs::rename(&tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}

/// Rows of an output written as they finish, `{"row": i, ...}` lines in
/// `<path>.partial`: [`write_json_lines`] to `path` later replaces that file
/// with the ordered rows, so a run stopped midway leaves its finished rows
/// there and `path` untouched.
pub struct RowStream {
    file: std::fs::File,
    path: std::path::PathBuf,
}

impl RowStream {
    pub fn create(path: &Path) -> Result<RowStream> {
        let mut partial = path.as_os_str().to_owned();
        partial.push(".partial");
        let path = std::path::PathBuf::from(partial);
        let file = std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(RowStream { file, path })
    }

    pub fn write(&mut self, row: usize, mut value: serde_json::Value) -> Result<()> {
        value["row"] = row.into();
        writeln!(self.file, "{value}").and_then(|_| self.file.flush()).with_context(|| format!("writing {}", self.path.display()))
    }
}

/// `--skip-bad-tasks` of the commands that read a task file.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TaskCheckArgs {
    /// Drop the tasks that cannot run (repository or base commit missing,
    /// empty gold, a prompt longer than the context) with a count, instead
    /// of refusing the whole file.
    #[arg(long)]
    pub skip_bad_tasks: bool,
}

/// The tasks of `path`, every one checked before anything large loads:
/// its repository under `[env] repos_dir`, its base commit, a non-empty
/// gold, and a prompt that fits `[episode] max_total_tokens`. All bad rows
/// are reported at once (file:line, reason); with `skip_bad` they are
/// dropped with a count instead.
pub fn checked_tasks(path: &Path, cfg: &trainer::run_config::RunConfig, skip_bad: bool) -> Result<Vec<rollout::tasks::Task>> {
    let repos = &cfg.env.repos_dir;
    anyhow::ensure!(repos.is_dir(), "[env] repos_dir {} is not a folder (the task file {} needs its repositories there: `fusegrpo repos fetch`)", repos.display(), path.display());
    let model_dir = trainer::hub::resolve_model_dir(&cfg.model.path)?;
    let tok = cfg.chat_tokenizer(&model_dir).with_context(|| format!("tokenizer in {}", cfg.tokenizer_dir(&model_dir).display()))?;
    let limit = cfg.episode.max_total_tokens;
    let fits = |task: &rollout::tasks::Task| match rollout::episode::driver::prompt_tokens(&tok, task, &cfg.episode) {
        Ok((_, ids)) if ids.len() >= limit => Some(format!("its prompt is {} tokens, [episode] max_total_tokens = {limit} leaves no room for a turn", ids.len())),
        Ok(_) => None,
        Err(e) => Some(format!("rendering its prompt: {e}")),
    };
    let checked = rollout::tasks::check::check_task_file(path, repos, &fits)?;
    let total = checked.good.len() + checked.bad.len();
    anyhow::ensure!(total > 0, "{}: no tasks", path.display());
    if checked.bad.is_empty() {
        return Ok(checked.tasks());
    }
    if checked.good.is_empty() && checked.bad.iter().all(|b| b.reason.contains("max_total_tokens")) {
        let shortest = checked.bad.iter().map(|b| b.reason.clone()).min_by_key(|r| r.len()).unwrap_or_default();
        anyhow::bail!("config key `episode.max_total_tokens`: {limit} is below every task's prompt in {} (e.g. {shortest})", path.display());
    }
    let list = checked.report();
    if skip_bad {
        eprint!("{list}");
        eprintln!("--skip-bad-tasks: dropped {} of {total} tasks in {}; {} remain", checked.bad.len(), path.display(), checked.good.len());
        anyhow::ensure!(!checked.good.is_empty(), "{}: no task can run", path.display());
        return Ok(checked.tasks());
    }
    anyhow::bail!("{} of {total} tasks in {} cannot run:\n{list}nothing was started; fix them, or pass --skip-bad-tasks to drop them", checked.bad.len(), path.display())
}

/// The process's exit status when a run stopped on SIGINT/SIGTERM with a
/// checkpoint saved (128 + SIGINT, as shells report an interrupted command).
pub const EXIT_INTERRUPTED: u8 = 130;

/// The error a command returns when a run was interrupted (a checkpoint
/// was saved): `main` prints its message and exits with [`EXIT_INTERRUPTED`].
#[derive(Debug)]
pub struct Interrupted(pub String);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Interrupted {}

/// The run folder a second Ctrl-C names (its newest complete checkpoint).
static RUN_DIR: std::sync::Mutex<Option<std::path::PathBuf>> = std::sync::Mutex::new(None);

/// Tell the interrupt handler which run folder is training now.
pub fn set_interrupt_run_dir(dir: &Path) {
    *RUN_DIR.lock().unwrap_or_else(|p| p.into_inner()) = Some(dir.to_path_buf());
}

/// The process's SIGINT/SIGTERM flag: the handler is installed once, on
/// first use, and every training loop of the process polls the same flag.
/// The first signal asks the loop to stop after its step (with a
/// checkpoint); a second ends the process at once with exit status 130,
/// naming the last complete checkpoint.
pub fn interrupt_flag() -> Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, OnceLock};
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    if let Some(f) = FLAG.get() {
        return Ok(f.clone());
    }
    let flag = Arc::new(AtomicBool::new(false));
    let handler_flag = flag.clone();
    ctrlc::set_handler(move || {
        if !handler_flag.swap(true, Ordering::SeqCst) {
            eprintln!("interrupt: stopping after this step with a checkpoint (interrupt again to stop at once)");
            return;
        }
        let dir = RUN_DIR.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let last = dir.as_deref().and_then(|d| trainer::checkpoint::latest(d).ok().flatten());
        match last {
            Some(last) => eprintln!("second interrupt: stopped at once; the last complete checkpoint is {} (resume with --resume auto)", last.display()),
            None => eprintln!("second interrupt: stopped at once; no complete checkpoint was saved"),
        }
        std::process::exit(EXIT_INTERRUPTED as i32);
    })
    .context("installing the SIGINT/SIGTERM handler")?;
    Ok(FLAG.get_or_init(|| flag).clone())
}

/// How a command reaches an OpenAI-compatible endpoint that plays a teacher,
/// a localizer or a judge: flattened into every command that talks to one
/// (`rollout`, `eval`, `synth`, `tasks synth`), and made from `[pipeline]`
/// for the pipeline's teacher.
#[derive(clap::Args, Debug, Clone)]
pub struct HttpTeacherArgs {
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

impl Default for HttpTeacherArgs {
    fn default() -> Self {
        HttpTeacherArgs { teacher_model: "teacher".into(), api_key_env: None, requests_per_second: None }
    }
}

impl HttpTeacherArgs {
    /// `[pipeline]`'s `teacher_model`, `api_key_env` and `requests_per_second`.
    pub fn of_pipeline(p: &trainer::run_config::PipelineSection) -> Self {
        HttpTeacherArgs { teacher_model: p.teacher_model.clone(), api_key_env: p.api_key_env.clone(), requests_per_second: p.requests_per_second }
    }

    /// The client settings for the endpoint at `url` (the rest at their defaults).
    pub fn config(&self, url: &str) -> rollout::teacher::http::HttpTeacherConfig {
        let mut c = rollout::teacher::http::HttpTeacherConfig::new(url.to_string(), self.teacher_model.clone());
        c.api_key_env = self.api_key_env.clone();
        c.requests_per_second = self.requests_per_second;
        c
    }
}

