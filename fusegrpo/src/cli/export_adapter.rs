//! `fusegrpo export-adapter`: a LoRA adapter (PEFT's folder, or a LoRA run's
//! checkpoint) copied into a clean folder in PEFT's layout with its weights
//! in another dtype (bf16 halves it), without the optimizer state: what a
//! trained adapter ships as ([`lm::lora::peft::export`]).

use anyhow::Result;
use std::path::PathBuf;
use trainer::device::DTypeKind;

#[derive(clap::Args)]
pub struct Args {
    /// The adapter: PEFT's folder, or a LoRA run's checkpoint.
    #[arg(long)]
    pub adapter: PathBuf,
    /// The exported adapter's folder (must not exist or be empty).
    #[arg(long)]
    pub out: PathBuf,
    /// The weights' dtype.
    #[arg(long, value_parser = apps::args::choice::<DTypeKind>(&DTypeKind::NAMES), default_value = "bf16")]
    pub dtype: DTypeKind,
}

pub fn run(args: Args) -> Result<()> {
    trainer::files::check_outputs(&[("--adapter", &args.adapter)], &[("--out", &args.out)])?;
    let bytes = lm::lora::peft::export(&args.adapter, &args.out, args.dtype.into())?;
    say!("exported {} -> {} ({:?} weights, {:.1} MB)", args.adapter.display(), args.out.display(), args.dtype, bytes as f64 / 1e6);
    Ok(())
}
