//! `fusegrpo import-gguf`: a GGUF file to a Hugging Face model folder
//! ([`lm::gguf`]).

use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum DtypeArg {
    F32,
    Bf16,
}

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file (llama, qwen2 or qwen3 architecture; byte-level BPE tokenizer).
    #[arg(long)]
    pub gguf: PathBuf,
    /// The model folder to write (must not exist, or be empty).
    #[arg(long)]
    pub out: PathBuf,
    /// Dtype of the written weights (every tensor is dequantized to f32 first).
    #[arg(long, value_enum, default_value = "f32")]
    pub dtype: DtypeArg,
}

pub fn run(args: Args) -> Result<()> {
    trainer::files::check_outputs(&[("--gguf", &args.gguf)], &[("--out", &args.out)])?;
    let dtype = match args.dtype {
        DtypeArg::F32 => candle_core::DType::F32,
        DtypeArg::Bf16 => candle_core::DType::BF16,
    };
    let report = lm::gguf::import(&args.gguf, &args.out, dtype)?;
    let line = serde_json::json!({
        "out": report.out, "architecture": report.architecture, "parameters": report.parameters,
        "vocab_size": report.vocab_size, "tensor_types": report.tensor_types,
    });
    outln!("{line}");
    Ok(())
}
