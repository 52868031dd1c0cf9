//! `fusegrpo generate`: continue each input sequence, all rows in one batch.

use super::common::{model_tokenizer, read_input_lines, RunOn};
use trainer::files::write_json_lines;
use trainer::model_policy::load::load_model;
use rand::SeedableRng;
use std::path::PathBuf;
use lm::generate::{generate_each, GenerateConfig, Generation};
use lm::sampling::SamplerConfig;

#[derive(clap::Args)]
pub struct Args {
    /// Model folder (config.json + safetensors) or hub id.
    #[arg(long)]
    pub model: String,
    /// JSONL, one `{"ids": [...]}` or `{"text": "..."}` prompt per line (text
    /// is encoded with the model folder's tokenizer.json, no special tokens added).
    #[arg(long)]
    pub input: PathBuf,
    /// JSONL, one `{"ids": [...new tokens...], "logprobs": [...]}` per prompt
    /// (and `"text"`, the new tokens decoded, when the model has a tokenizer).
    #[arg(long)]
    pub output: PathBuf,
    /// New tokens per row (fewer when a stop id is generated).
    #[arg(long)]
    pub max_new_tokens: usize,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f64,
    /// 0 = no top-k truncation.
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Token ids that end a row (repeatable); none by default.
    #[arg(long = "stop-id")]
    pub stop_ids: Vec<u32>,
    #[command(flatten)]
    pub on: RunOn,
    #[command(flatten)]
    pub adapter: super::common::AdapterArg,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    trainer::files::check_outputs(&[("--input", &args.input), ("--model", args.model.as_ref())], &[("--output", &args.output)])?;
    anyhow::ensure!(args.temperature >= 0.0, "--temperature must be >= 0, got {}", args.temperature);
    anyhow::ensure!(args.top_p > 0.0 && args.top_p <= 1.0, "--top-p must be in (0, 1], got {}", args.top_p);
    let (model, _) = load_model(&args.model, args.adapter.adapter.as_deref(), &args.on.placement())?;
    let tokenizer = model_tokenizer(&args.model)?;
    let prompts = read_input_lines(&args.input, model.config().vocab_size, tokenizer.as_ref())?;
    for (n, ids) in prompts.iter().enumerate() {
        anyhow::ensure!(!ids.is_empty(), "{}:{}: empty prompt", args.input.display(), n + 1);
    }
    let context = model.config().max_position_embeddings;
    if let Some((n, ids)) = prompts.iter().enumerate().max_by_key(|(_, ids)| ids.len()) {
        anyhow::ensure!(
            ids.len() + args.max_new_tokens <= context,
            "--max-new-tokens {}: the longest prompt ({}:{}, {} tokens) plus the new tokens exceed the model's context (max_position_embeddings = {context}); at most {} new tokens fit",
            args.max_new_tokens,
            args.input.display(),
            n + 1,
            ids.len(),
            context.saturating_sub(ids.len())
        );
    }
    let cfg = GenerateConfig {
        max_new_tokens: args.max_new_tokens,
        sampler: SamplerConfig { temperature: args.temperature, top_p: args.top_p, top_k: args.top_k },
        stop_tokens: args.stop_ids.clone(),
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(args.seed);
    let t0 = std::time::Instant::now();
    // Rows are streamed as they finish, `{"row": i, ...}` lines in
    // OUTPUT.partial, which the ordered OUTPUT then replaces (atomically).
    let mut stream = trainer::files::RowStream::create(&args.output)?;
    let gens = generate_each(&model, &prompts, &cfg, &mut rng, |i, g| {
        let row = output_row(g, tokenizer.as_ref()).map_err(|e| lm::error::Error::Invalid { what: "generate".into(), message: e.to_string() })?;
        stream.write(i, row).map_err(|e| lm::error::Error::Invalid { what: args.output.display().to_string(), message: e.to_string() })
    })?;
    let new_tokens: usize = gens.iter().map(|g| g.ids.len()).sum();
    let secs = t0.elapsed().as_secs_f64();
    let rows = gens.iter().map(|g| output_row(g, tokenizer.as_ref())).collect::<anyhow::Result<Vec<_>>>()?;
    drop(stream);
    write_json_lines(&args.output, &rows)?;
    tracing::info!(rows = rows.len(), new_tokens, secs, tokens_per_sec = new_tokens as f64 / secs.max(1e-9), "generated");
    Ok(())
}

/// One output line: the new ids, their log-probs, and the decoded text when
/// the model has a tokenizer.
fn output_row(g: &Generation, tokenizer: Option<&tokenizers::Tokenizer>) -> anyhow::Result<serde_json::Value> {
    let mut row = serde_json::json!({"ids": g.ids, "logprobs": g.logprobs});
    if let Some(tok) = tokenizer {
        row["text"] = tok.decode(&g.ids, false).map_err(|e| anyhow::anyhow!("decoding generated ids: {e}"))?.into();
    }
    Ok(row)
}
