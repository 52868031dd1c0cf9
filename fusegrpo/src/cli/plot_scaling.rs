//! `fusegrpo plot-scaling EVAL_DIR [--out PNG]`: F1 file, F1 function and
//! tokens spent per task against the number of attempts N (log scale), one
//! curve per selector (and per selector + refine), from the `scaling.json`
//! that `eval --attempts N --out-dir EVAL_DIR` writes ([`apps::plot::scaling`]).

use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Output folder of `eval --attempts N --out-dir DIR` (holds scaling.json).
    pub eval_dir: PathBuf,
    /// Output PNG (default: EVAL_DIR/scaling.png).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<()> {
    let out = apps::plot::scaling::draw_dir(&args.eval_dir, args.out.as_deref())?;
    say!("plot-scaling: {}", out.display());
    Ok(())
}

