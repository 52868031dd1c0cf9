//! Typed errors of the model crate (loading, saving and running a model,
//! tokenizers, adapters; `trainer` wraps them in its own). Each names the
//! file, tensor, key or argument it is about, so a user can act on it
//! without a debugger.

use std::path::PathBuf;

/// Everything that can go wrong while loading, saving or running a model.
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
    Config {
        path: PathBuf,
        key: String,
        message: String,
    },
    #[error("{path}: corrupt or unreadable safetensors file: {message}")]
    Safetensors { path: PathBuf, message: String },
    #[error("{dir}: weight index names shard `{shard}`, which is missing")]
    MissingShard { dir: PathBuf, shard: String },
    #[error("{dir}: no weights found (expected model.safetensors or model.safetensors.index.json)")]
    NoWeights { dir: PathBuf },
    #[error("{dir}: tensor `{name}` is missing from the checkpoint")]
    MissingTensor { dir: PathBuf, name: String },
    #[error("{path}: tensor `{name}` has shape {found:?}, expected {expected:?} from config.json")]
    TensorShape {
        path: PathBuf,
        name: String,
        found: Vec<usize>,
        expected: Vec<usize>,
    },
    #[error("{path}: tensor `{name}` has dtype {dtype}, expected one of bf16, f16, f32")]
    TensorDtype {
        path: PathBuf,
        name: String,
        dtype: String,
    },
    #[error("model `{id}`: {message}")]
    Hub { id: String, message: String },
    #[error("{path}: GGUF: {message}")]
    Gguf { path: PathBuf, message: String },
    #[error("{what}: {message}")]
    Invalid { what: String, message: String },
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// The caller asked to stop ([`crate::generate::generate_until`]).
    #[error("generation cancelled after {tokens} tokens")]
    Cancelled { tokens: usize },
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
