//! `fusegrpo init-tiny`: a random tiny model (Qwen3, or Llama / Qwen2 with
//! `--architecture`) in Hugging Face format, with a tokenizer (a copy of a
//! real one, or a small BPE trained here).

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use trainer::config::{Architecture, RopeScaling};
use trainer::weights::{save_checkpoint, ShardPolicy};
use trainer::ModelConfig;

/// `--architecture`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum ArchArg {
    Qwen3,
    Qwen2,
    Llama,
}

/// The llama3 rope scaling `--llama3-rope` writes (Llama 3.1's factors, with
/// a short original context so tiny runs reach every band).
const TINY_LLAMA3_ROPE: RopeScaling = RopeScaling::Llama3 {
    factor: 8.0,
    low_freq_factor: 1.0,
    high_freq_factor: 4.0,
    original_max_position_embeddings: 256.0,
};

/// Size of the vocabulary rows when a real Qwen3 tokenizer is used (the
/// published checkpoints pad 151,669 tokens to 151,936 rows).
const QWEN3_VOCAB_ROWS: usize = 151_936;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("tok").required(true).args(["tokenizer", "small_vocab"])))]
pub struct Args {
    /// Output folder (created).
    #[arg(long)]
    pub out: PathBuf,
    /// Copy tokenizer.json and tokenizer_config.json from this folder (the real
    /// Qwen3 tokenizer: scripts/fetch-qwen-tokenizer.sh prints where it is).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Train a small byte-level BPE of this many ids (Qwen3's special tokens kept).
    #[arg(long)]
    pub small_vocab: Option<usize>,
    /// Also train the small BPE on this repository's files at HEAD
    /// (`owner/name` under --repos-dir) and on the tool declarations, so the
    /// run's prompts and tool outputs take fewer tokens.
    #[arg(long, requires_all = ["repos_dir", "small_vocab"])]
    pub corpus_repo: Option<String>,
    /// Folder of `<owner>__<name>[.git]` repositories (for --corpus-repo).
    #[arg(long)]
    pub repos_dir: Option<PathBuf>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long, default_value_t = 64)]
    pub hidden_size: usize,
    #[arg(long, default_value_t = 128)]
    pub intermediate_size: usize,
    #[arg(long, default_value_t = 2)]
    pub layers: usize,
    #[arg(long, default_value_t = 4)]
    pub heads: usize,
    #[arg(long, default_value_t = 2)]
    pub kv_heads: usize,
    #[arg(long, default_value_t = 32)]
    pub head_dim: usize,
    /// Separate lm_head weights instead of tying them to the embeddings.
    #[arg(long)]
    pub untied: bool,
    /// Write this many safetensors shards plus an index (1 = model.safetensors).
    #[arg(long, default_value_t = 1)]
    pub shards: usize,
    /// The decoder family (Qwen3: q/k norm; Qwen2: q/k/v biases; Llama: neither).
    #[arg(long, value_enum, default_value = "qwen3")]
    pub architecture: ArchArg,
    /// Llama only: llama3 rope scaling (factor 8, original context 256).
    #[arg(long)]
    pub llama3_rope: bool,
}

pub fn run(args: Args) -> Result<()> {
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let vocab = match (&args.tokenizer, args.small_vocab) {
        (Some(dir), _) => {
            trainer::files::copy_tokenizer(dir, &args.out, true)?;
            QWEN3_VOCAB_ROWS
        }
        (None, Some(n)) => {
            let extra = match (&args.corpus_repo, &args.repos_dir) {
                (Some(repo), Some(dir)) => corpus_of(repo, dir)?,
                _ => Vec::new(),
            };
            rollout::chat::write_small_tokenizer_with(&args.out, n, &extra)
                .with_context(|| format!("training a {n}-id tokenizer into {}", args.out.display()))?;
            n
        }
        (None, None) => anyhow::bail!("give --tokenizer DIR or --small-vocab N"),
    };
    let cfg = ModelConfig::new_tiny(
        vocab,
        args.hidden_size,
        args.intermediate_size,
        args.layers,
        args.heads,
        args.kv_heads,
        args.head_dim,
        !args.untied,
    );
    let (arch, rope) = match (args.architecture, args.llama3_rope) {
        (ArchArg::Llama, llama3) => (Architecture::Llama, if llama3 { TINY_LLAMA3_ROPE } else { RopeScaling::Default }),
        (_, true) => anyhow::bail!("--llama3-rope needs --architecture llama"),
        (ArchArg::Qwen3, false) => (Architecture::Qwen3, RopeScaling::Default),
        (ArchArg::Qwen2, false) => (Architecture::Qwen2, RopeScaling::Default),
    };
    let cfg = if arch == Architecture::Qwen3 { cfg } else { cfg.with_architecture(arch, rope) };
    let cfg = ModelConfig::from_raw(cfg.raw.clone(), Path::new("<init-tiny arguments>"))?;
    let weights = trainer::init::random_weights(&cfg, args.seed, candle_core::DType::F32, &candle_core::Device::Cpu)?;
    let policy = if args.shards > 1 { ShardPolicy::Count(args.shards) } else { ShardPolicy::Single };
    save_checkpoint(&args.out, &cfg, &weights, policy)?;
    tracing::info!(out = %args.out.display(), params = trainer::params::parameter_count(&cfg), vocab, "wrote a tiny model");
    println!("{}", args.out.display());
    Ok(())
}

/// Weight of the run's own text against the built-in corpus.
const CORPUS_REPEATS: usize = 30;

/// The fixed prose Qwen3's chat template puts around tool declarations and calls.
const CHAT_TEMPLATE_PROSE: &str = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n</tools>\n\n\
For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n\
<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>\nRepository issue:\n\n";

/// The text files of `repo` at HEAD and the tool declarations, as BPE
/// training documents (each repeated so the run's text dominates the merges).
fn corpus_of(repo: &str, repos_dir: &std::path::Path) -> Result<Vec<String>> {
    let store = rollout::repo::SnapshotStore::open(repos_dir);
    let snap = store.get(repo, "HEAD").with_context(|| format!("--corpus-repo {repo} in {}", repos_dir.display()))?;
    let mut docs: Vec<String> =
        snap.files().iter().filter_map(|f| f.text()).map(|t| String::from_utf8_lossy(t).into_owned()).collect();
    docs.push(rollout::episode::prompt::SYSTEM_PROMPT.to_string());
    for schema in rollout::episode::prompt::tool_schemas() {
        docs.push(serde_json::to_string(&schema)?);
    }
    docs.push(CHAT_TEMPLATE_PROSE.to_string());
    let paths: Vec<&str> = snap.files().iter().map(|f| f.path.as_str()).collect();
    docs.push(paths.join("\n"));
    Ok(std::iter::repeat_n(docs, CORPUS_REPEATS).flatten().collect())
}
