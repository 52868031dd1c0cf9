//! Typed errors of the trainer library: its own (run configs, checkpoints,
//! the optimizer's state, batches, ...) and the model crate's, wrapped as
//! they are (`lm::error::Error`, same message). Each names the file,
//! tensor, key or argument it is about, so a user can act on it without a
//! debugger.

use std::path::PathBuf;

/// Everything that can go wrong while configuring, training or saving.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: invalid JSON: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: config key `{key}`: {message}")]
    Config { path: PathBuf, key: String, message: String },
    #[error("{path}: corrupt or unreadable safetensors file: {message}")]
    Safetensors { path: PathBuf, message: String },
    #[error("{what}: {message}")]
    Invalid { what: String, message: String },
    /// A checkpoint's optimizer state does not fit the parameters.
    #[error("optimizer state: tensor `{name}` {message}")]
    OptimizerState { name: String, message: String },
    /// The model crate's error (loading, saving or running a model).
    #[error(transparent)]
    Lm(#[from] lm::error::Error),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
    pub fn invalid(what: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Invalid { what: what.into(), message: message.into() }
    }
}
