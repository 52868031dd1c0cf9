//! `fusegrpo plot RUN_DIR [--out PNG]`: the curves of a training run
//! ([`apps::plot`]).

use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Run folder of `fusegrpo train` (holds metrics.jsonl).
    pub run_dir: PathBuf,
    /// Output PNG (default: RUN_DIR/plot.png).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Image width in pixels.
    #[arg(long, default_value_t = 1500)]
    pub width: u32,
    /// Image height in pixels.
    #[arg(long, default_value_t = 900)]
    pub height: u32,
    /// Window (in steps) of the reward's trailing moving average; 0 or 1 turns it off.
    #[arg(long, default_value_t = 10)]
    pub smooth: usize,
}

pub fn run(args: Args) -> Result<()> {
    let metrics = args.run_dir.join("metrics.jsonl");
    trainer::files::check_outputs(&[("RUN_DIR", &args.run_dir), ("RUN_DIR's", &metrics)], &args.out.iter().map(|o| ("--out", o.as_path())).collect::<Vec<_>>())?;
    outln!("{}", apps::plot::plot_run(&args.run_dir, args.out.as_deref(), args.width, args.height, args.smooth)?);
    Ok(())
}
