//! `fusegrpo serve`: an OpenAI-compatible chat-completions server over a
//! model folder (see `apps::serve`). Prints `listening on http://ADDR` on
//! stdout once bound (so `--port 0` can be used by scripts and tests).

use super::common::RunOn;
use trainer::model_policy::load::load_model;
use anyhow::{Context, Result};
use rollout::chat::ChatTokenizer;
use std::io::Write;
use std::path::PathBuf;
use apps::serve::{bind, ChatServer, ServeConfig};

#[derive(clap::Args)]
pub struct Args {
    /// Model folder (config.json + safetensors) or hub id.
    #[arg(long)]
    pub model: String,
    /// Tokenizer folder (tokenizer.json + tokenizer_config.json); default: the model's.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// A Jinja chat template to use instead of the tokenizer's own.
    #[arg(long)]
    pub chat_template: Option<PathBuf>,
    /// Address to listen on (loopback by default; the server has no authentication).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port (0 = any free port; the bound address is printed).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Model id listed by /v1/models and put in responses; default: the folder's name.
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// New tokens for requests without max_tokens (capped by the context).
    #[arg(long, default_value_t = 1024)]
    pub default_max_tokens: usize,
    /// Seed of the draws of requests that give no seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub on: RunOn,
    #[command(flatten)]
    pub adapter: super::common::AdapterArg,
}

pub fn run(args: Args) -> Result<()> {
    anyhow::ensure!(
        args.default_max_tokens >= 1,
        "--default-max-tokens must be at least 1"
    );
    let (model, _) = load_model(&args.model, args.adapter.adapter.as_deref(), &args.on.placement())?;
    let model_dir = lm::hub::resolve_model_dir(&args.model)?;
    let tok_dir = args.tokenizer.clone().unwrap_or_else(|| model_dir.clone());
    let tokenizer = ChatTokenizer::from_dir_with_template(&tok_dir, args.chat_template.as_deref())
        .with_context(|| format!("loading the tokenizer from {}", tok_dir.display()))?;
    let model_name = args.served_model_name.clone().unwrap_or_else(|| {
        let name = model_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        name.filter(|n| !n.is_empty())
            .unwrap_or_else(|| args.model.clone())
    });
    let mut server = ChatServer::new(
        model,
        tokenizer,
        ServeConfig {
            model_name,
            default_max_tokens: args.default_max_tokens,
            seed: args.seed,
        },
    )?;
    let (listener, addr) = bind(&args.host, args.port)?;
    let mut out = crate::console::Stdout;
    writeln!(out, "listening on http://{addr}")?;
    out.flush()?;
    tracing::info!(%addr, "serving POST /v1/chat/completions, GET /v1/models");
    server.run(listener, apps::serve::http::Limits::default());
    Ok(())
}
