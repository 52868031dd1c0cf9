//! `fusegrpo score`: per-token log-probs of each input sequence.

use super::common::{model_tokenizer, read_input_lines, RunOn};
use trainer::files::write_json_lines;
use trainer::model_policy::load::load_model;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Model folder (config.json + safetensors) or hub id.
    #[arg(long)]
    pub model: String,
    /// JSONL, one `{"ids": [...]}` or `{"text": "..."}` per line (text is
    /// encoded with the model folder's tokenizer.json, no special tokens added).
    #[arg(long)]
    pub input: PathBuf,
    /// JSONL, one `{"ids": [...], "logprobs": [null, ...]}` per input line.
    #[arg(long)]
    pub output: PathBuf,
    #[command(flatten)]
    pub on: RunOn,
    #[command(flatten)]
    pub adapter: super::common::AdapterArg,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    trainer::files::check_outputs(&[("--input", &args.input), ("--model", args.model.as_ref())], &[("--output", &args.output)])?;
    let (model, _) = load_model(&args.model, args.adapter.adapter.as_deref(), &args.on.placement())?;
    let tokenizer = model_tokenizer(&args.model)?;
    let rows = read_input_lines(&args.input, model.config().vocab_size, tokenizer.as_ref())?;
    let mut out = Vec::with_capacity(rows.len());
    for ids in &rows {
        let logprobs = lm::logprobs::score_sequence(&model, ids)?;
        out.push(serde_json::json!({ "ids": ids, "logprobs": logprobs }));
    }
    write_json_lines(&args.output, &out)?;
    tracing::info!(rows = out.len(), output = %args.output.display(), "scored");
    Ok(())
}

