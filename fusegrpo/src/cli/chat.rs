//! `fusegrpo chat ...`: chat-template utilities.
//!
//! `fusegrpo chat render --tokenizer DIR --input CONV.json` renders a
//! conversation with the tokenizer folder's own chat template, exactly as
//! transformers' `apply_chat_template` does, and prints one JSON line
//! `{"text": "...", "ids": [...]}`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use rollout::chat::{ChatRequest, ChatTokenizer};

/// Chat-template subcommands.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Render a conversation with a tokenizer's chat template; print its text and ids.
    ///
    /// The input is one JSON object in the transformers message format:
    /// {"messages": [{"role": "user", "content": "..."}, ...], "tools": [...],
    /// "add_generation_prompt": true, "enable_thinking": false}
    /// ("tools", "add_generation_prompt" and "enable_thinking" are optional).
    /// Output: one line {"text": "...", "ids": [...]} on stdout.
    Render(RenderArgs),
}

/// Arguments of `chat render`.
#[derive(clap::Args)]
pub struct RenderArgs {
    /// Tokenizer folder with tokenizer.json and tokenizer_config.json (chat template).
    #[arg(long, value_name = "DIR")]
    pub tokenizer: PathBuf,
    /// Conversation JSON file ("-" reads stdin).
    #[arg(long, value_name = "CONV.json")]
    pub input: PathBuf,
}

/// Runs a `chat` subcommand.
pub fn run(cmd: Command) -> Result<()> {
    match cmd {
        Command::Render(args) => render(&args),
    }
}

/// `chat render`: read the conversation, render, encode, print one JSON line.
fn render(args: &RenderArgs) -> Result<()> {
    let text = if args.input.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading the conversation from stdin")?
    } else {
        std::fs::read_to_string(&args.input)
            .with_context(|| format!("reading {}", args.input.display()))?
    };
    let request: ChatRequest = serde_json::from_str(&text).with_context(|| {
        format!(
            "{}: expected {{\"messages\": [...], \"tools\": [...], \"add_generation_prompt\": bool}}",
            args.input.display()
        )
    })?;
    let tokenizer = ChatTokenizer::from_dir(&args.tokenizer)
        .with_context(|| format!("loading the tokenizer from {}", args.tokenizer.display()))?;
    let (text, ids) = tokenizer
        .render_ids(&request)
        .with_context(|| format!("rendering {}", args.input.display()))?;
    let line = serde_json::json!({ "text": text, "ids": ids });
    outln!("{line}");
    Ok(())
}
