//! An SFT run: teacher trajectories filtered (`<run>/filter.json` holds
//! the counts), the `[[sft.openings]]` curriculum phases, then fine-tuning
//! driven by [`drive`]; a held-out split of the trajectories reports its
//! loss during training and its tasks' episode metrics at the end
//! (`<run>/heldout_eval.json`).

use super::drive::{drive, Schedule, Step, Steps};
use super::{Run, RunEnd, RunOptions, Stage};
use crate::checkpoint::DataCursor;
use crate::run_config::{OpeningPhase, RunConfig};
use crate::sft::batches::{batch_at, heldout_split, total_steps};
use crate::sft::{heldout_loss, SftBatch};
use crate::sft;
use crate::error::{Context, Result};
use rollout::episode::filter::{filter, SftExample};
use rollout::episode::opening::openings;
use rollout::episode::summary::Summary;
use rollout::episode::Episode;
use rollout::tasks::Task;
use std::path::{Path, PathBuf};

/// Filter `data`, then fine-tune the config's model on the kept
/// trajectories into `run_dir`, after the `[[sft.openings]]` curriculum
/// phases (each in `run_dir/opening-<k>`) when the config has any. `tasks`
/// (any superset of the data's tasks) lets the end-of-run evaluation roll
/// out the held-out tasks.
pub fn sft(cfg: &RunConfig, data: &Path, run_dir: &Path, tasks: &[Task], opts: &RunOptions) -> Result<RunEnd> {
    // Refusals first: nothing (filter.json included) is written into a
    // folder whose run would be lost.
    for k in 0..cfg.sft.openings.len() {
        super::check_folder(&run_dir.join(format!("opening-{}", k + 1)), opts)?;
    }
    super::check_folder(run_dir, opts)?;
    let episodes = crate::episodes::jsonl::read(data)?;
    let (examples, report) = filter(&episodes, &cfg.sft.filter);
    std::fs::create_dir_all(run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
    if crate::dist::current().rank() == 0 {
        std::fs::write(run_dir.join("filter.json"), serde_json::to_string_pretty(&report)?)?;
        crate::progress::say(&format!("sft filter: {}", report.summary()));
    }
    crate::error::ensure!(!examples.is_empty(), "{}: no trajectory passed the filter ({})", data.display(), report.summary());
    let mut start = cfg.clone();
    if !cfg.sft.openings.is_empty() {
        let turn_start = turn_start_id(cfg)?;
        for (k, phase) in cfg.sft.openings.iter().enumerate() {
            match opening_phase(&start, &episodes, phase, turn_start, &run_dir.join(format!("opening-{}", k + 1)), opts)? {
                RunEnd::Done(checkpoint) => start = start.with_trained(&checkpoint),
                interrupted @ RunEnd::Interrupted(_) => return Ok(interrupted),
            }
        }
    }
    let (end, held_rows) = train(&start, &examples, run_dir, opts)?;
    // The held-out episodes are rolled out once, by rank 0.
    let rank = crate::dist::current().rank();
    if let (RunEnd::Done(last), 0) = (&end, rank) {
        evaluate_heldout(&start, last, &examples, &held_rows, tasks, run_dir)?;
    }
    Ok(end)
}

/// One curriculum phase: SFT on the openings (issue + first `phase.turns`
/// assistant turns, no system prompt) of the answered trajectories, from
/// `cfg`'s model, into `dir`.
fn opening_phase(cfg: &RunConfig, episodes: &[Episode], phase: &OpeningPhase, turn_start: u32, dir: &Path, opts: &RunOptions) -> Result<RunEnd> {
    let examples = openings(episodes, phase.turns, turn_start);
    crate::error::ensure!(!examples.is_empty(), "sft.openings: no answered trajectory to take openings of {} turns from", phase.turns);
    let mut pcfg = cfg.clone();
    pcfg.sft.epochs = phase.epochs;
    pcfg.sft.batch_rows = phase.batch_rows;
    pcfg.sft.micro_batch_rows = phase.batch_rows;
    pcfg.sft.eval_tasks = 0;
    pcfg.sft.openings.clear();
    let mean_tokens = examples.iter().map(|e| e.tokens.len()).sum::<usize>() / examples.len();
    crate::progress::say(&format!("sft opening phase {}: {} openings of {} turn(s), {mean_tokens} tokens on average", dir.display(), examples.len(), phase.turns));
    let opts = RunOptions { max_steps: None, ..opts.clone() };
    Ok(train(&pcfg, &examples, dir, &opts)?.0)
}

/// The id that starts the run's turns (`<|im_start|>` in ChatML; openings
/// start at the user turn's).
fn turn_start_id(cfg: &RunConfig) -> Result<u32> {
    let base_dir = lm::hub::resolve_model_dir(&cfg.model.path)?;
    let tok_dir = cfg.tokenizer_dir(&base_dir);
    let tok = cfg.chat_tokenizer(&base_dir).with_context(|| format!("tokenizer in {}", tok_dir.display()))?;
    Ok(tok.special().turn_start)
}

/// Fine-tune `cfg`'s model on `examples` (`cfg.sft`'s epochs, batches,
/// schedule and held-out split) into `run_dir`, with checkpoints, exact
/// resume and metrics. Returns how it ended and the held-out rows.
fn train(cfg: &RunConfig, examples: &[SftExample], run_dir: &Path, opts: &RunOptions) -> Result<(RunEnd, Vec<usize>)> {
    let s = &cfg.sft;
    let (train_rows, held_rows) = heldout_split(examples, s.heldout_fraction, s.seed);
    crate::error::ensure!(!train_rows.is_empty(), "every kept trajectory is held out (sft.heldout_fraction)");
    let run_steps = total_steps(train_rows.len(), s.batch_rows, s.epochs);
    let total = opts.max_steps.unwrap_or(run_steps);
    if crate::dist::current().rank() == 0 {
        crate::progress::say(&format!("sft: {} training / {} held-out trajectories, {} steps", train_rows.len(), held_rows.len(), total));
    }

    let (run, weights, adapter) = Run::open(cfg, run_dir, opts, s.keep_last, Stage::Sft)?;
    let mut trainer = sft::Trainer::new(cfg, &run.model_cfg, &weights, adapter.as_ref(), run_steps)?;
    drop((weights, adapter));
    crate::malloc::release_free_memory();
    let mut cursor = DataCursor::default();
    if let Some(state) = run.resume(&mut trainer.optimizer, &trainer.sharding, &trainer.vars)? {
        trainer.step = state.step;
        cursor = state.data;
    }
    let schedule = Schedule {
        total,
        save_every: opts.save_every.unwrap_or(s.save_every),
        max_nonfinite: cfg.train.max_nonfinite_steps,
        unit: "sft steps",
    };
    let mut steps = SftSteps { trainer, cursor, examples, train_rows: &train_rows, held_rows: &held_rows, cfg: s, device: run.device.clone() };
    let end = drive(&run, &mut steps, &schedule)?;
    Ok((end, held_rows))
}

/// SFT's steps: each takes the next batch of the shuffled rows (epoch
/// after epoch), with the held-out loss at `sft.eval_every` and the last.
struct SftSteps<'a> {
    trainer: sft::Trainer,
    cursor: DataCursor,
    examples: &'a [SftExample],
    train_rows: &'a [usize],
    held_rows: &'a [usize],
    cfg: &'a crate::run_config::SftSection,
    device: candle_core::Device,
}

impl Steps for SftSteps<'_> {
    type Metrics = crate::sft::SftStepMetrics;

    fn done(&self) -> u64 {
        self.trainer.step
    }

    fn step(&mut self, last: bool) -> Result<Option<Step<Self::Metrics>>> {
        let s = self.cfg;
        let Some((rows, next)) = batch_at(self.examples, self.train_rows, s.batch_rows, s.seed, u64::MAX, self.cursor) else { return Ok(None) };
        let batch = SftBatch::of(self.examples, &rows, &self.device)?;
        let t = &mut self.trainer;
        let mut m = t.step(&batch, self.cursor.epoch)?;
        self.cursor = next;
        if !self.held_rows.is_empty() && (last || (s.eval_every > 0 && t.step.is_multiple_of(s.eval_every))) {
            m.heldout_loss = Some(heldout_loss(&t.model, self.examples, self.held_rows, s.micro_batching()?, &*t.dist)?);
        }
        let mine: Vec<usize> = rows[crate::dist::share(&*t.dist, rows.len())].to_vec();
        let mut share = serde_json::Map::new();
        share.insert("rows".into(), serde_json::json!(mine));
        let message = format!("loss {:.4}{}", m.loss, m.heldout_loss.map_or(String::new(), |h| format!(" held-out {h:.4}")));
        Ok(Some(Step { skipped: m.skipped, message, share, metrics: m }))
    }

    fn save(&self, run: &Run) -> Result<PathBuf> {
        let t = &self.trainer;
        run.save(t.step, Default::default(), self.cursor, &super::grpo::trained(&t.vars), &t.optimizer, &t.sharding, &[])
    }
}

/// Roll out the fine-tuned model on (up to `sft.eval_tasks` of) the
/// held-out tasks and write their table to `<run>/heldout_eval.json`.
fn evaluate_heldout(cfg: &RunConfig, checkpoint: &Path, examples: &[SftExample], held_rows: &[usize], tasks: &[Task], run_dir: &Path) -> Result<()> {
    let mut ids: Vec<&str> = held_rows.iter().map(|&i| examples[i].task_id.as_str()).collect();
    ids.dedup();
    let held: Vec<Task> = ids.iter().filter_map(|id| tasks.iter().find(|t| t.instance_id == *id).cloned()).take(cfg.sft.eval_tasks).collect();
    if held.is_empty() {
        if cfg.sft.eval_tasks > 0 && !held_rows.is_empty() {
            crate::progress::say("sft: held-out episode metrics skipped (the held-out tasks are not in the config's task file)");
        }
        return Ok(());
    }
    let eval_cfg = cfg.with_trained(checkpoint);
    let episodes = crate::episodes::run_policy(&eval_cfg, &held, &crate::run_config::PolicyChoice::Model, 1, &Default::default())?;
    let summary = Summary::of(&episodes);
    std::fs::write(run_dir.join("heldout_eval.json"), serde_json::to_string_pretty(&summary)?)?;
    crate::progress::say(&format!("sft held-out episodes:\n{}\n{}", Summary::HEADER, summary.row("sft")));
    Ok(())
}
