//! `fusegrpo sft`: supervised fine-tuning on teacher trajectories
//! (`fusegrpo synth` output), filtered first (`<run>/filter.json` holds the
//! counts), with the same optimizer, checkpoints, exact resume, metrics
//! (`<run>/metrics.jsonl`) and progress bar as `train`; a held-out split of
//! the tasks reports its loss during training and its episode metrics at
//! the end (`<run>/heldout_eval.json`).

use super::run::{Run, RunEnd, RunOptions};
use anyhow::{Context, Result};
use rollout::episode::filter::{filter, SftExample};
use rollout::episode::opening::openings;
use rollout::episode::summary::Summary;
use rollout::episode::Episode;
use rollout::tasks::Task;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use trainer::checkpoint::{self, DataCursor};
use trainer::run_config::RunConfig;
use trainer::sft::batches::{batch_at, heldout_split, total_steps};
use trainer::run_config::OpeningPhase;
use trainer::sft::{heldout_loss, SftBatch};
use trainer::trainers::sft;

#[derive(clap::Args)]
pub struct Args {
    /// Run configuration (TOML; `[sft]` and `[sft.filter]`).
    #[arg(long)]
    pub config: PathBuf,
    /// Teacher trajectories (JSONL from `fusegrpo synth`; default: sft.data).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Run folder (default: checkpoints/<run name>-sft).
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub run: super::run::RunArgs,
}

pub fn run(args: Args) -> Result<()> {
    let mut cfg = RunConfig::from_file(&args.config)?;
    args.run.apply(&mut cfg);
    let data = args.data.clone().or_else(|| cfg.sft.data.clone()).context("no trajectories: pass --data or set sft.data in the config")?;
    let run_dir = args.out.clone().unwrap_or_else(|| PathBuf::from("checkpoints").join(format!("{}-sft", cfg.name)));
    let tasks_path = cfg.pipeline.as_ref().and_then(|p| p.tasks.clone()).or_else(|| cfg.train.tasks.clone());
    let tasks = match tasks_path {
        Some(p) => rollout::tasks::load_tasks(&p)?,
        None => Vec::new(),
    };
    let opts = args.run.options();
    sft(&cfg, &data, &run_dir, &tasks, &opts)?.into_result()
}

/// Episodes from a JSONL file; errors name the file and line.
pub fn read_episodes(path: &Path) -> Result<Vec<Episode>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut out = Vec::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("{}:{}: reading", path.display(), n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let e: Episode = serde_json::from_str(&line).with_context(|| format!("{}:{}: not an episode line (fusegrpo synth/rollout output)", path.display(), n + 1))?;
        anyhow::ensure!(
            e.tokens.len() == e.loss_mask.len(),
            "{}:{}: {} tokens but {} loss-mask entries",
            path.display(),
            n + 1,
            e.tokens.len(),
            e.loss_mask.len()
        );
        out.push(e);
    }
    Ok(out)
}

/// Filter `data`, then fine-tune the config's model on the kept
/// trajectories into `run_dir`, after the `[[sft.openings]]` curriculum
/// phases (each in `run_dir/opening-<k>`) when the config has any. `tasks`
/// (any superset of the data's tasks) lets the end-of-run evaluation roll
/// out the held-out tasks.
pub fn sft(cfg: &RunConfig, data: &Path, run_dir: &Path, tasks: &[Task], opts: &RunOptions) -> Result<RunEnd> {
    // Refusals first: nothing (filter.json included) is written into a
    // folder whose run would be lost.
    for k in 0..cfg.sft.openings.len() {
        super::run::check_folder(&run_dir.join(format!("opening-{}", k + 1)), opts)?;
    }
    super::run::check_folder(run_dir, opts)?;
    let episodes = read_episodes(data)?;
    let (examples, report) = filter(&episodes, &cfg.sft.filter);
    std::fs::create_dir_all(run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
    if trainer::dist::current().rank() == 0 {
        std::fs::write(run_dir.join("filter.json"), serde_json::to_string_pretty(&report)?)?;
        eprintln!("sft filter: {}", report.summary());
    }
    anyhow::ensure!(!examples.is_empty(), "{}: no trajectory passed the filter ({})", data.display(), report.summary());
    let mut start = cfg.clone();
    if !cfg.sft.openings.is_empty() {
        let im_start = im_start_id(cfg)?;
        for (k, phase) in cfg.sft.openings.iter().enumerate() {
            match opening_phase(&start, &episodes, phase, im_start, &run_dir.join(format!("opening-{}", k + 1)), opts)? {
                RunEnd::Done(checkpoint) => start = start.with_trained(&checkpoint),
                interrupted @ RunEnd::Interrupted(_) => return Ok(interrupted),
            }
        }
    }
    let (end, held_rows) = train(&start, &examples, run_dir, opts)?;
    // The held-out episodes are rolled out once, by rank 0.
    let rank = trainer::dist::current().rank();
    if let (RunEnd::Done(last), 0) = (&end, rank) {
        evaluate_heldout(&start, last, &examples, &held_rows, tasks, run_dir)?;
    }
    Ok(end)
}

/// One curriculum phase: SFT on the openings (issue + first `phase.turns`
/// assistant turns, no system prompt) of the answered trajectories, from
/// `cfg`'s model, into `dir`.
fn opening_phase(cfg: &RunConfig, episodes: &[Episode], phase: &OpeningPhase, im_start: u32, dir: &Path, opts: &RunOptions) -> Result<RunEnd> {
    let examples = openings(episodes, phase.turns, im_start);
    anyhow::ensure!(!examples.is_empty(), "sft.openings: no answered trajectory to take openings of {} turns from", phase.turns);
    let mut pcfg = cfg.clone();
    pcfg.sft.epochs = phase.epochs;
    pcfg.sft.batch_rows = phase.batch_rows;
    pcfg.sft.micro_batch_rows = phase.batch_rows;
    pcfg.sft.eval_tasks = 0;
    pcfg.sft.openings.clear();
    let mean_tokens = examples.iter().map(|e| e.tokens.len()).sum::<usize>() / examples.len();
    eprintln!("sft opening phase {}: {} openings of {} turn(s), {mean_tokens} tokens on average", dir.display(), examples.len(), phase.turns);
    let opts = RunOptions { max_steps: None, ..opts.clone() };
    Ok(train(&pcfg, &examples, dir, &opts)?.0)
}

/// The run's `<|im_start|>` id (openings start at the user turn's).
fn im_start_id(cfg: &RunConfig) -> Result<u32> {
    let base_dir = trainer::hub::resolve_model_dir(&cfg.model.path)?;
    let tok_dir = cfg.tokenizer_dir(&base_dir);
    let tok = cfg.chat_tokenizer(&base_dir).with_context(|| format!("tokenizer in {}", tok_dir.display()))?;
    Ok(tok.special().im_start)
}

/// Fine-tune `cfg`'s model on `examples` (`cfg.sft`'s epochs, batches,
/// schedule and held-out split) into `run_dir`, with checkpoints, exact
/// resume and metrics. Returns how it ended and the held-out rows.
fn train(cfg: &RunConfig, examples: &[SftExample], run_dir: &Path, opts: &RunOptions) -> Result<(RunEnd, Vec<usize>)> {
    let s = &cfg.sft;
    let (train_rows, held_rows) = heldout_split(examples, s.heldout_fraction, s.seed);
    anyhow::ensure!(!train_rows.is_empty(), "every kept trajectory is held out (sft.heldout_fraction)");
    let run_steps = total_steps(train_rows.len(), s.batch_rows, s.epochs);
    let total = opts.max_steps.unwrap_or(run_steps);
    if trainer::dist::current().rank() == 0 {
        eprintln!("sft: {} training / {} held-out trajectories, {} steps", train_rows.len(), held_rows.len(), total);
    }

    let (run, weights, adapter) = Run::open(cfg, run_dir, opts, s.keep_last, super::run::Stage::Sft)?;
    let device = run.device.clone();
    let mut trainer = sft::Trainer::new(cfg, &run.model_cfg, &weights, adapter.as_ref(), run_steps)?;
    drop((weights, adapter));
    trainer::malloc::release_free_memory();
    let mut cursor = DataCursor::default();
    if let Some(state) = run.resume(&mut trainer.optimizer, &trainer.sharding, &trainer.vars)? {
        trainer.step = state.step;
        cursor = state.data;
    }
    let mut metrics = run.metrics(trainer.step)?;
    let mut rank_log = run.rank_log(trainer.step)?;
    let stop = super::common::interrupt_flag()?;
    let save_every = opts.save_every.unwrap_or(s.save_every).max(1);
    let save = |trainer: &sft::Trainer, cursor: DataCursor| run.save(trainer.step, Default::default(), cursor, &super::train::trained(&trainer.vars), &trainer.optimizer, &trainer.sharding);
    let bar = super::rollout::progress_bar(total, "sft steps");
    if trainer.dist.rank() > 0 {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar.set_position(trainer.step);
    while trainer.step < total {
        let Some((rows, next)) = batch_at(examples, &train_rows, s.batch_rows, s.seed, u64::MAX, cursor) else { break };
        let batch = SftBatch::of(examples, &rows, &device)?;
        let mut m = trainer.step(&batch, cursor.epoch)?;
        cursor = next;
        let last = trainer.step == total;
        if !held_rows.is_empty() && (last || (s.eval_every > 0 && trainer.step % s.eval_every == 0)) {
            m.heldout_loss = Some(heldout_loss(&trainer.model, examples, &held_rows, s.micro_batching()?, &*trainer.dist)?);
        }
        metrics.write(&m)?;
        bar.set_position(trainer.step);
        bar.set_message(format!("loss {:.4}{}", m.loss, m.heldout_loss.map_or(String::new(), |h| format!(" held-out {h:.4}"))));
        let interrupted = trainer::dist::any(&*trainer.dist, stop.load(std::sync::atomic::Ordering::SeqCst))?;
        let mut saved = None;
        if trainer.step % save_every == 0 || last || interrupted {
            let dir = save(&trainer, cursor)?;
            bar.println(format!("saved {}", dir.display()));
            saved = Some(dir);
        }
        if let Some(log) = &mut rank_log {
            let mine: Vec<usize> = rows[trainer::dist::share(&*trainer.dist, rows.len())].to_vec();
            let line = serde_json::json!({"step": m.step, "rank": trainer.dist.rank(), "ranks": trainer.dist.world(), "pid": std::process::id(),
                                          "rows": mine, "params_hash": run.take_saved_hash()});
            log.write(&line)?;
        }
        if let (true, Some(dir)) = (interrupted, saved) {
            bar.abandon();
            return Ok((RunEnd::Interrupted(dir), held_rows));
        }
    }
    bar.finish();
    let last = match checkpoint::latest(run_dir)? {
        Some(dir) => dir,
        None => save(&trainer, cursor)?,
    };
    Ok((RunEnd::Done(last), held_rows))
}

/// Roll out the fine-tuned model on (up to `sft.eval_tasks` of) the
/// held-out tasks and write their table to `<run>/heldout_eval.json`.
fn evaluate_heldout(cfg: &RunConfig, checkpoint: &Path, examples: &[SftExample], held_rows: &[usize], tasks: &[Task], run_dir: &Path) -> Result<()> {
    let mut ids: Vec<&str> = held_rows.iter().map(|&i| examples[i].task_id.as_str()).collect();
    ids.dedup();
    let held: Vec<Task> = ids.iter().filter_map(|id| tasks.iter().find(|t| t.instance_id == *id).cloned()).take(cfg.sft.eval_tasks).collect();
    if held.is_empty() {
        if cfg.sft.eval_tasks > 0 && !held_rows.is_empty() {
            eprintln!("sft: held-out episode metrics skipped (the held-out tasks are not in the config's task file)");
        }
        return Ok(());
    }
    let eval_cfg = cfg.with_trained(checkpoint);
    let episodes = super::rollout::run_policy(&eval_cfg, &held, &super::rollout::PolicyChoice::Model, 1, &Default::default())?;
    let summary = Summary::of(&episodes);
    std::fs::write(run_dir.join("heldout_eval.json"), serde_json::to_string_pretty(&summary)?)?;
    eprintln!("sft held-out episodes:\n{}\n{}", Summary::HEADER, summary.row("sft"));
    Ok(())
}
