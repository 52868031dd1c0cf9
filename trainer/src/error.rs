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
    /// A refusal or failure said in words: a bad input, a missing file, ...
    #[error("{0}")]
    Message(String),
    /// An error under what was being done when it happened ([`Context`]).
    #[error("{context}")]
    Context {
        context: String,
        #[source]
        source: Box<Error>,
    },
    /// An episode that could not be run (rollout's error, as it is).
    #[error("rollout")]
    Rollout(#[from] rollout::episode::driver::RolloutError),
    /// The chat template or tokenizer (rollout's error, as it is).
    #[error(transparent)]
    Chat(#[from] rollout::chat::ChatError),
    /// A task file (rollout's error, as it is).
    #[error(transparent)]
    Task(#[from] rollout::tasks::TaskError),
    /// The vLLM engine (rollout's error, as it is).
    #[error(transparent)]
    Vllm(#[from] rollout::engine::vllm::VllmError),
    /// The HTTP teacher (rollout's error, as it is).
    #[error(transparent)]
    Teacher(#[from] rollout::teacher::http::HttpTeacherError),
    /// A TensorBoard event file.
    #[error(transparent)]
    EventFile(#[from] EventFileError),
    /// The SIGINT/SIGTERM handler could not be installed.
    #[error(transparent)]
    Signal(#[from] ctrlc::Error),
    /// A run stopped by SIGINT/SIGTERM with its checkpoint saved.
    #[error(transparent)]
    Interrupted(#[from] Interrupted),
    /// A read or write whose error names no path.
    #[error(transparent)]
    StdIo(#[from] std::io::Error),
    #[error(transparent)]
    SerdeJson(#[from] serde_json::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
    pub fn invalid(what: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Invalid { what: what.into(), message: message.into() }
    }

    /// This error under `context` (what was being done when it happened).
    pub fn context(self, context: impl std::fmt::Display) -> Self {
        Error::Context { context: context.to_string(), source: Box::new(self) }
    }

    /// The interruption this error is, if it is one (under any context).
    pub fn interrupted(&self) -> Option<&Interrupted> {
        match self {
            Error::Interrupted(stop) => Some(stop),
            Error::Context { source, .. } => source.interrupted(),
            _ => None,
        }
    }
}

/// What was being done when an error happened ([`Context`]): the error
/// with a line above it, its cause kept as its source.
pub trait Context<T> {
    /// The error (or `None`) under `context`.
    fn context<C: std::fmt::Display>(self, context: C) -> Result<T>;
    /// [`Context::context`] with the line made only on an error.
    fn with_context<C: std::fmt::Display, F: FnOnce() -> C>(self, context: F) -> Result<T>;
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn context<C: std::fmt::Display>(self, context: C) -> Result<T> {
        self.map_err(|e| Error::Context { context: context.to_string(), source: Box::new(e.into()) })
    }
    fn with_context<C: std::fmt::Display, F: FnOnce() -> C>(self, context: F) -> Result<T> {
        self.map_err(|e| Error::Context { context: context().to_string(), source: Box::new(e.into()) })
    }
}

impl<T> Context<T> for Option<T> {
    fn context<C: std::fmt::Display>(self, context: C) -> Result<T> {
        self.ok_or_else(|| Error::Message(context.to_string()))
    }
    fn with_context<C: std::fmt::Display, F: FnOnce() -> C>(self, context: F) -> Result<T> {
        self.ok_or_else(|| Error::Message(context().to_string()))
    }
}

/// Returns [`Error::Message`] of the `format!` arguments.
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::error::Error::Message(::std::format!($($arg)*)))
    };
}

/// [`bail!`] unless the condition holds.
macro_rules! ensure {
    ($cond:expr, $($arg:tt)*) => {
        if !$cond {
            $crate::error::bail!($($arg)*);
        }
    };
}

pub(crate) use {bail, ensure};

/// [`Error::Message`] of the `format!` arguments.
macro_rules! format_err {
    ($($arg:tt)*) => {
        $crate::error::Error::Message(::std::format!($($arg)*))
    };
}

pub(crate) use format_err;

/// The error a command returns when a run was interrupted (a checkpoint
/// was saved): `main` prints its message and exits with `interrupt::EXIT_INTERRUPTED`.
#[derive(Debug)]
pub struct Interrupted(pub String);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Interrupted {}

/// An event file that cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum EventFileError {
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("byte {offset}: {message}")]
    Corrupt { offset: usize, message: String },
}

#[cfg(test)]
mod tests {
    use super::{Context as _, Error, Interrupted, Result};
    use rollout::episode::driver::RolloutError;

    /// Rollout's error is kept as it is, the source of `Error::Rollout`, not a string.
    #[test]
    fn a_rollout_error_is_wrapped_with_its_source() {
        let e: Error = RolloutError::Task { task: "t1".into(), message: "no such commit".into() }.into();
        let source = std::error::Error::source(&e).expect("a source");
        assert!(matches!(source.downcast_ref::<RolloutError>(), Some(RolloutError::Task { .. })));
        assert_eq!(format!("{e}: {source}"), "rollout: task t1: no such commit");
    }

    /// A context is a line above its cause, the cause kept as the source;
    /// an interruption is found under any context.
    #[test]
    fn a_context_keeps_its_cause() {
        let r: Result<()> = Err(std::io::Error::other("disk full")).context("writing a.jsonl");
        let e = r.unwrap_err();
        assert_eq!(e.to_string(), "writing a.jsonl");
        assert_eq!(std::error::Error::source(&e).map(|s| s.to_string()).as_deref(), Some("disk full"));
        let stop = Error::from(Interrupted("interrupted: checkpoint saved".into())).context("stage grpo");
        assert_eq!(stop.interrupted().map(|i| i.0.as_str()), Some("interrupted: checkpoint saved"));
        assert!(e.interrupted().is_none());
        assert_eq!(None::<u8>.context("no `sampling` RNG").unwrap_err().to_string(), "no `sampling` RNG");
    }
}
