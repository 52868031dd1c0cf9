//! `fusegrpo bench checkpoint`: host memory of saving and resuming a
//! training checkpoint (model, AdamW moments and masters) of a random model
//! of the given shape: the peak RSS growth over the resident state during
//! the save, and during the resume into a fresh optimizer, next to the
//! largest tensor's size. Prints one JSON line.

use std::io::Write;
use super::shape::Shape;
use super::{reset_peak_rss, rss_kib, Clock};
use anyhow::{ensure, Result};
use candle_core::DType;
use trainer::checkpoint::{self, DataCursor, TrainState, FORMAT_VERSION};
use trainer::optim::{AdamW, AdamWConfig, Gradients};
use lm::CausalLm;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub shape: Shape,
    /// Where the checkpoint is written (default: a folder in the temporary directory, removed afterwards).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub on: crate::args::RunOn,
}

pub fn run(a: Args, out: &mut dyn Write) -> Result<()> {
    let cfg = a.shape.config(64)?;
    let (device, dtype) = (a.on.open()?, DType::from(a.on.dtype));
    let w = lm::init::random_weights(&cfg, 0, dtype, &device)?;
    let (model, vars) = CausalLm::trainable(&cfg, &w)?;
    drop(w);
    // One step on random gradients, so that the moments are real pages
    // (fresh zeros are untouched memory and would hide a second copy).
    let stepped = || -> Result<AdamW> {
        let mut opt = AdamW::new(&vars, AdamWConfig::default())?;
        let mut grads = Gradients::default();
        for (name, v) in &vars {
            grads.add(name, &v.as_tensor().randn_like(0.0, 1.0)?.to_dtype(DType::F32)?)?;
        }
        opt.step(&vars, &grads, 1e-4)?;
        Ok(opt)
    };
    let optimizer = stepped()?;
    let scratch = std::env::temp_dir().join(format!("fusegrpo-bench-checkpoint-{}", std::process::id()));
    let run_dir = a.dir.clone().unwrap_or_else(|| scratch.clone());
    let largest = model.tensors().values().map(|t| t.elem_count() * t.dtype().size_in_bytes()).max().unwrap_or(0);
    let state = TrainState {
        format_version: FORMAT_VERSION,
        step: 1,
        rngs: Default::default(),
        data: DataCursor::default(),
        config: serde_json::json!({}),
        config_hash: String::new(),
        arch_hash: cfg.arch_hash(),
    };
    let exported = optimizer.export_state()?;
    let state_bytes: usize = exported.values().map(|t| t.elem_count() * t.dtype().size_in_bytes()).sum();
    let rss_before_save = rss_kib("VmRSS");
    ensure!(reset_peak_rss(), "cannot reset the peak RSS (/proc/self/clear_refs)");
    let clock = Clock::start(&device)?;
    let dir = checkpoint::save(&run_dir, &cfg, &model.tensors(), &exported, &state, 0)?;
    let save_seconds = clock.seconds()?;
    let save_growth = rss_kib("VmHWM").saturating_sub(rss_before_save);
    drop(exported);
    let mut fresh = stepped()?;
    let rss_before_resume = rss_kib("VmRSS");
    reset_peak_rss();
    let clock = Clock::start(&device)?;
    fresh.import_from(&checkpoint::OptimizerFile::open(&dir, &device)?)?;
    let resume_seconds = clock.seconds()?;
    let resume_growth = rss_kib("VmHWM").saturating_sub(rss_before_resume);
    if a.dir.is_none() {
        std::fs::remove_dir_all(&scratch)?;
    }
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    writeln!(
        out,
        "{}",
        serde_json::json!({
            "save_seconds": save_seconds,
            "resume_seconds": resume_seconds,
            "model_mib": mib(model.tensors().values().map(|t| t.elem_count() * t.dtype().size_in_bytes()).sum()),
            "optimizer_state_mib": mib(state_bytes),
            "largest_tensor_mib": mib(largest),
            "save_peak_growth_mib": save_growth as f64 / 1024.0,
            "resume_peak_growth_mib": resume_growth as f64 / 1024.0,
            "dtype": format!("{dtype:?}").to_lowercase(),
        })
    )?;
    Ok(())
}
