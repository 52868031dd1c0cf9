//! `fusegrpo train`: GRPO with checkpoints, exact resume, a metrics line
//! per step in `<run>/metrics.jsonl` and a progress bar.

use anyhow::{Context, Result};
use rand::SeedableRng;
use rollout::chat::ChatTokenizer;
use rollout::episode::driver::Env;
use rollout::repo::SnapshotStore;
use rollout::tools::ToolRunner;
use std::io::Write;
use std::path::PathBuf;
use trainer::checkpoint::{self, DataCursor, RngState, TrainState, FORMAT_VERSION};
use trainer::run_config::RunConfig;
use trainer::train::{sampler::TaskSampler, Trainer};
use trainer::weights::load_weights;

#[derive(clap::Args)]
pub struct Args {
    /// Run configuration (TOML; see configs/).
    #[arg(long)]
    pub config: PathBuf,
    /// Run folder (default: checkpoints/<run name>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// `auto` (newest complete checkpoint in the run folder, if any) or a checkpoint folder.
    #[arg(long)]
    pub resume: Option<String>,
    /// Stop after this many steps in total (default: train.steps).
    #[arg(long)]
    pub max_steps: Option<u64>,
    /// Save every N steps (default: train.save_every).
    #[arg(long)]
    pub save_every: Option<u64>,
    /// Resume even if the run config changed since the checkpoint.
    #[arg(long)]
    pub allow_config_change: bool,
}

pub fn run(args: Args) -> Result<()> {
    let cfg = RunConfig::from_file(&args.config)?;
    let run_dir = args.out.clone().unwrap_or_else(|| PathBuf::from("checkpoints").join(&cfg.name));
    let tasks_path = cfg.train.tasks.clone().context("train.tasks is not set in the config")?;
    let tasks = rollout::tasks::load_tasks(&tasks_path)?;
    anyhow::ensure!(!tasks.is_empty(), "{}: no tasks", tasks_path.display());
    let opts = RunOptions { resume: args.resume, max_steps: args.max_steps, save_every: args.save_every, allow_config_change: args.allow_config_change };
    train(&cfg, &run_dir, &tasks, &opts).map(|_| ())
}

/// How a training run (GRPO or SFT) starts and stops.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// `auto` or a checkpoint folder.
    pub resume: Option<String>,
    pub max_steps: Option<u64>,
    pub save_every: Option<u64>,
    pub allow_config_change: bool,
}

/// How a training run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    /// All steps done; the newest checkpoint.
    Done(PathBuf),
    /// SIGINT/SIGTERM: a checkpoint was saved, `--resume auto` continues.
    Interrupted,
}

/// GRPO on `tasks` into `run_dir` (checkpoints, metrics.jsonl).
pub fn train(cfg: &RunConfig, run_dir: &std::path::Path, tasks: &[rollout::tasks::Task], args: &RunOptions) -> Result<RunEnd> {
    let cfg = cfg.clone();
    let run_dir = run_dir.to_path_buf();
    let cfg_json = serde_json::to_value(&cfg)?;
    let cfg_hash = checkpoint::config_hash(&cfg_json);

    let resume_dir = match args.resume.as_deref() {
        None => None,
        Some("auto") => checkpoint::latest(&run_dir)?,
        Some(path) => Some(PathBuf::from(path)),
    };
    let base_dir = trainer::hub::resolve_model_dir(&cfg.model.path)?;
    let model_dir = resume_dir.clone().unwrap_or_else(|| base_dir.clone());
    let model_cfg = trainer::Qwen3Config::from_file(&model_dir.join("config.json"))?;
    let device = cfg.model.device.open()?;
    let weights = load_weights(&model_dir, &model_cfg, cfg.model.dtype.into(), &device)?;
    // The KL reference is always the run's starting model, also on resume.
    let reference = match (&resume_dir, cfg.grpo.beta > 0.0) {
        (Some(_), true) => Some(load_weights(&base_dir, &model_cfg, cfg.model.dtype.into(), &device)?),
        _ => None,
    };
    let rng = rand_chacha::ChaCha8Rng::seed_from_u64(cfg.sampling.seed);
    let mut trainer = Trainer::new(cfg.clone(), &model_cfg, &weights, reference.as_ref(), rng)?;
    drop((weights, reference));
    let mut sampler = TaskSampler::new(cfg.sampling.seed, tasks.len(), DataCursor::default());
    if let Some(dir) = &resume_dir {
        let state = checkpoint::load_state(dir)?;
        checkpoint::check_compatible(dir, &state, &checkpoint::arch_hash(&model_cfg), &cfg_hash, args.allow_config_change)?;
        trainer.optimizer.import_state(&checkpoint::load_optimizer(dir, &device)?.into_iter().collect())?;
        trainer.optimizer.sync_params_from_masters(&trainer.vars)?;
        trainer.step = state.step;
        trainer.sampling_rng = state.rngs.get("sampling").context("state.json has no `sampling` RNG")?.restore()?;
        sampler.cursor = state.data;
        eprintln!("resumed from {} at step {}", dir.display(), state.step);
    }

    let tok_dir = cfg.tokenizer_dir(&base_dir);
    let tok = ChatTokenizer::from_dir(&tok_dir).with_context(|| format!("tokenizer in {}", tok_dir.display()))?;
    let store = SnapshotStore::open(&cfg.env.repos_dir);
    let tools = ToolRunner::new(cfg.env.tools.clone());
    let env = Env { tokenizer: &tok, store: &store, tools: &tools, reward: &cfg.reward };
    std::fs::create_dir_all(&run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
    let metrics_path = run_dir.join("metrics.jsonl");
    // Lines past the checkpoint we resume from (or all, on a fresh start)
    // belong to steps that will be redone.
    truncate_metrics(&metrics_path, trainer.step)?;
    let stop = super::common::interrupt_flag()?;
    let mut metrics = std::fs::OpenOptions::new().create(true).append(true).open(&metrics_path)
        .with_context(|| format!("opening {}", metrics_path.display()))?;
    let total = args.max_steps.unwrap_or(cfg.train.steps);
    let save_every = args.save_every.unwrap_or(cfg.train.save_every).max(1);
    let bar = super::rollout::progress_bar(total, "steps");
    bar.set_position(trainer.step);
    let save = |trainer: &Trainer, cursor: DataCursor| -> Result<PathBuf> {
        let state = TrainState {
            format_version: FORMAT_VERSION,
            step: trainer.step,
            rngs: [("sampling".to_string(), RngState::capture(&trainer.sampling_rng))].into(),
            data: cursor,
            config: cfg_json.clone(),
            config_hash: cfg_hash.clone(),
            arch_hash: checkpoint::arch_hash(&model_cfg),
        };
        let opt = trainer.optimizer.export_state()?.into_iter().collect();
        let dir = checkpoint::save(&run_dir, &model_cfg, &trainer.model.tensors(), &opt, &state, cfg.train.keep_last)?;
        copy_tokenizer(&tok_dir, &dir)?;
        Ok(dir)
    };
    let mut nonfinite_in_a_row = 0;
    while trainer.step < total {
        let batch: Vec<_> = sampler.next(cfg.train.tasks_per_step).into_iter().map(|i| tasks[i].clone()).collect();
        let m = trainer.step(&env, &batch)?;
        writeln!(metrics, "{}", serde_json::to_string(&m)?)?;
        metrics.flush()?;
        bar.set_position(trainer.step);
        bar.set_message(format!("reward {:.3} f1_file {:.3} e {:.3} loss {:.4}", m.reward, m.f1_file, m.e, m.loss));
        nonfinite_in_a_row = if m.skipped { nonfinite_in_a_row + 1 } else { 0 };
        if nonfinite_in_a_row >= cfg.train.max_nonfinite_steps.max(1) {
            let dir = save(&trainer, sampler.cursor)?;
            anyhow::bail!(
                "{nonfinite_in_a_row} steps in a row had a NaN/inf loss or gradient (train.max_nonfinite_steps); saved {} and stopped",
                dir.display()
            );
        }
        let interrupted = stop.load(std::sync::atomic::Ordering::SeqCst);
        if trainer.step % save_every == 0 || trainer.step == total || interrupted {
            let dir = save(&trainer, sampler.cursor)?;
            bar.println(format!("saved {}", dir.display()));
        }
        if interrupted {
            bar.abandon_with_message("interrupted: checkpoint saved, resume with --resume auto");
            return Ok(RunEnd::Interrupted);
        }
    }
    bar.finish();
    let last = match checkpoint::latest(&run_dir)? {
        Some(dir) => dir,
        None => save(&trainer, sampler.cursor)?,
    };
    Ok(RunEnd::Done(last))
}

/// Keep only the metrics lines of steps `1..=step`.
pub fn truncate_metrics(path: &std::path::Path, step: u64) -> Result<()> {
    if !path.exists() {
        return Ok(());
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let kept: String = text
        .lines()
        .filter(|l| {
            serde_json::from_str::<serde_json::Value>(l).ok().and_then(|v| v["step"].as_u64()).is_some_and(|s| s <= step)
        })
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(path, kept).with_context(|| format!("writing {}", path.display()))
}

/// A checkpoint folder is a complete model folder: copy the tokenizer in.
pub fn copy_tokenizer(from: &std::path::Path, to: &std::path::Path) -> Result<()> {
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        if from.join(f).exists() {
            std::fs::copy(from.join(f), to.join(f)).with_context(|| format!("copying {f} into {}", to.display()))?;
        }
    }
    Ok(())
}
