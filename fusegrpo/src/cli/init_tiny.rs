//! `fusegrpo init-tiny`: a random tiny model (Qwen3, or Llama / Qwen2 with
//! `--architecture`) in Hugging Face format, with a tokenizer
//! ([`recipe::tiny`]).

use anyhow::Result;
use std::path::PathBuf;
use rollout::chat::SmallChatFormat;
use lm::config::Architecture;
use recipe::tiny::{write_tiny, TinySpec, TinyTokenizer};

/// `--architecture`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum ArchArg {
    Qwen3,
    Qwen2,
    Llama,
}

/// `--chat-format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum ChatFormatArg {
    Qwen3,
    Llama3,
}

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
    /// The small BPE's chat format: Qwen3's special tokens and template, or
    /// Llama 3's header tokens with configs/llama3-tools.jinja.
    #[arg(long, value_enum, default_value = "qwen3", requires = "small_vocab")]
    pub chat_format: ChatFormatArg,
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
    let tokenizer = match (args.tokenizer, args.small_vocab) {
        (Some(dir), _) => TinyTokenizer::Copy(dir),
        (None, Some(ids)) => {
            let format = match args.chat_format {
                ChatFormatArg::Qwen3 => SmallChatFormat::Qwen3,
                ChatFormatArg::Llama3 => SmallChatFormat::Llama3,
            };
            TinyTokenizer::Small { ids, corpus: args.corpus_repo.zip(args.repos_dir), format }
        }
        (None, None) => anyhow::bail!("give --tokenizer DIR or --small-vocab N"),
    };
    let architecture = match args.architecture {
        ArchArg::Qwen3 => Architecture::Qwen3,
        ArchArg::Qwen2 => Architecture::Qwen2,
        ArchArg::Llama => Architecture::Llama,
    };
    let spec = TinySpec {
        tokenizer,
        seed: args.seed,
        hidden_size: args.hidden_size,
        intermediate_size: args.intermediate_size,
        layers: args.layers,
        heads: args.heads,
        kv_heads: args.kv_heads,
        head_dim: args.head_dim,
        tied: !args.untied,
        shards: args.shards,
        architecture,
        llama3_rope: args.llama3_rope,
    };
    write_tiny(&args.out, &spec)?;
    outln!("{}", args.out.display());
    Ok(())
}
