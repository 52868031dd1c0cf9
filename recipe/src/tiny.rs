//! A random tiny model (Qwen3, Llama or Qwen2) in Hugging Face format with
//! a tokenizer (a copy of a real one, or a small BPE trained here), as
//! `fusegrpo init-tiny` writes it for tests, demos and benchmarks.

use lm::config::{Architecture, RopeScaling};
use lm::weights::{save_checkpoint, ShardPolicy};
use lm::ModelConfig;
use anyhow::{Context, Result};
use rollout::chat::SmallChatFormat;
use std::path::{Path, PathBuf};

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

/// Where a tiny model's tokenizer comes from.
#[derive(Debug, Clone)]
pub enum TinyTokenizer {
    /// A copy of this folder's tokenizer.json and tokenizer_config.json
    /// (the real Qwen3 tokenizer: 151,936 vocabulary rows).
    Copy(PathBuf),
    /// A small byte-level BPE of this many ids in a chat format (Qwen3's
    /// special tokens and template, or Llama 3's), trained also on a
    /// repository's files at HEAD (`owner/name` in a repositories folder)
    /// and the tool declarations when given.
    Small { ids: usize, corpus: Option<(String, PathBuf)>, format: SmallChatFormat },
}

/// The shape of a tiny model.
#[derive(Debug, Clone)]
pub struct TinySpec {
    pub tokenizer: TinyTokenizer,
    pub seed: u64,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// The LM head tied to the embeddings.
    pub tied: bool,
    /// Safetensors shards (1: model.safetensors).
    pub shards: usize,
    pub architecture: Architecture,
    /// Llama only: llama3 rope scaling (factor 8, original context 256).
    pub llama3_rope: bool,
}

/// Writes the tiny model of `spec` into `out` (created); returns its config.
pub fn write_tiny(out: &Path, spec: &TinySpec) -> Result<ModelConfig> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let vocab = match &spec.tokenizer {
        TinyTokenizer::Copy(dir) => {
            trainer::files::copy_tokenizer(dir, out, true)?;
            QWEN3_VOCAB_ROWS
        }
        TinyTokenizer::Small { ids, corpus, format } => {
            let extra = match corpus {
                Some((repo, dir)) => corpus_of(repo, dir)?,
                None => Vec::new(),
            };
            rollout::chat::write_small_tokenizer_in(out, *ids, &extra, *format).with_context(|| format!("training a {ids}-id tokenizer into {}", out.display()))?;
            *ids
        }
    };
    let cfg = ModelConfig::new_tiny(vocab, spec.hidden_size, spec.intermediate_size, spec.layers, spec.heads, spec.kv_heads, spec.head_dim, spec.tied);
    let rope = match (spec.architecture, spec.llama3_rope) {
        (Architecture::Llama, true) => TINY_LLAMA3_ROPE,
        (_, true) => anyhow::bail!("--llama3-rope needs --architecture llama"),
        (_, false) => RopeScaling::Default,
    };
    let cfg = if spec.architecture == Architecture::Qwen3 { cfg } else { cfg.with_architecture(spec.architecture, rope) };
    let cfg = ModelConfig::from_raw(cfg.raw.clone(), Path::new("<init-tiny arguments>"))?;
    let weights = lm::init::random_weights(&cfg, spec.seed, candle_core::DType::F32, &candle_core::Device::Cpu)?;
    let policy = if spec.shards > 1 { ShardPolicy::Count(spec.shards) } else { ShardPolicy::Single };
    save_checkpoint(out, &cfg, &weights, policy)?;
    tracing::info!(out = %out.display(), params = lm::params::parameter_count(&cfg), vocab, "wrote a tiny model");
    Ok(cfg)
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
    for schema in rollout::episode::prompt::tool_schemas(&rollout::tools::ToolConfig::default()) {
        docs.push(serde_json::to_string(&schema)?);
    }
    docs.push(CHAT_TEMPLATE_PROSE.to_string());
    let paths: Vec<&str> = snap.files().iter().map(|f| f.path.as_str()).collect();
    docs.push(paths.join("\n"));
    Ok(std::iter::repeat_n(docs, CORPUS_REPEATS).flatten().collect())
}
