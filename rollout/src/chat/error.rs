//! Typed errors of the chat module: each names the file, key or token at fault.

use std::path::PathBuf;

/// Everything that can go wrong loading a tokenizer, rendering a conversation
/// or writing the small tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// A file could not be read or written.
    #[error("cannot access {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file is not valid JSON.
    #[error("{path}: invalid JSON")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A required key is absent from a JSON file.
    #[error("{path}: missing key `{key}`")]
    MissingKey { path: PathBuf, key: String },
    /// A key is present but its value is unusable.
    #[error("{path}: key `{key}`: {reason}")]
    BadKey {
        path: PathBuf,
        key: String,
        reason: String,
    },
    /// The `tokenizers` crate failed to load, encode, decode, train or save.
    #[error("{context}: {message}")]
    Tokenizer { context: String, message: String },
    /// A token the chat format needs does not map to exactly one id.
    #[error("{path}: token `{token}` is not a single id in the vocabulary")]
    MissingToken { path: PathBuf, token: String },
    /// The chat template does not compile.
    #[error("{path}: chat template does not compile: {message}")]
    TemplateCompile { path: PathBuf, message: String },
    /// Rendering the chat template failed (bad message shape, `raise_exception`, ...).
    #[error("chat template rendering failed: {message}")]
    TemplateRender { message: String },
    /// A request is malformed (e.g. a message is not a JSON object).
    #[error("invalid chat request: {0}")]
    Request(String),
    /// The small tokenizer cannot have the requested vocabulary size.
    #[error(
        "small tokenizer: vocab_size {requested} is {problem} (it must be between {min} and {max})"
    )]
    VocabSize {
        requested: usize,
        problem: &'static str,
        min: usize,
        max: usize,
    },
}

impl ChatError {
    /// Wraps an error from the `tokenizers` crate with what we were doing.
    pub(crate) fn tokenizer(context: impl Into<String>, err: impl std::fmt::Display) -> Self {
        ChatError::Tokenizer {
            context: context.into(),
            message: err.to_string(),
        }
    }

    /// Wraps a minijinja error, keeping its full detail (line, source excerpt).
    pub(crate) fn render(err: &minijinja::Error) -> Self {
        ChatError::TemplateRender {
            message: describe_template_error(err),
        }
    }
}

/// minijinja's `Display` is terse; `{:#}` adds the template line and excerpt.
pub(crate) fn describe_template_error(err: &minijinja::Error) -> String {
    let mut msg = format!("{err:#}");
    let mut source = std::error::Error::source(err);
    while let Some(inner) = source {
        msg.push_str(&format!("\ncaused by: {inner}"));
        source = inner.source();
    }
    msg
}

/// Result alias for the chat module.
pub type Result<T, E = ChatError> = std::result::Result<T, E>;
