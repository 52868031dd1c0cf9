//! The three read-only tools (`grep`, `glob`, `read_file`) over a
//! [`Snapshot`](crate::repo::Snapshot): deterministic (sorted), bounded by
//! [`ToolConfig`] caps with a visible truncation note, and total: every
//! failure becomes an error text for the model with an empty entity set.

mod args;
mod error;
mod glob;
mod grep;
mod output;
mod read_file;

pub use error::ToolError;
pub use grep::{grep_matches, GrepQuery};

use std::panic::{catch_unwind, AssertUnwindSafe};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::entities::EntitySet;
use crate::repo::Snapshot;
use crate::toolcall::{ToolCall, ToolCallError};

/// Default [`ToolConfig::max_grep_matches`].
pub const MAX_GREP_MATCHES: usize = 100;
/// Default [`ToolConfig::max_glob_results`].
pub const MAX_GLOB_RESULTS: usize = 100;
/// Default [`ToolConfig::max_read_lines`].
pub const MAX_READ_LINES: usize = 300;
/// Default [`ToolConfig::max_line_chars`].
pub const MAX_LINE_CHARS: usize = 300;
/// Default [`ToolConfig::max_output_bytes`].
pub const MAX_OUTPUT_BYTES: usize = 16 * 1024;
/// Default [`ToolConfig::max_pattern_chars`].
pub const MAX_PATTERN_CHARS: usize = 1000;
/// Default [`ToolConfig::regex_size_limit`]: compiled program bytes.
pub const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// Default [`ToolConfig::regex_dfa_size_limit`]: lazy DFA cache bytes.
pub const REGEX_DFA_SIZE_LIMIT: usize = 1 << 20;

/// Caps of the tools; defaults are the constants above.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolConfig {
    /// Matching lines shown by `grep`.
    pub max_grep_matches: usize,
    /// Paths shown by `glob`.
    pub max_glob_results: usize,
    /// Lines shown by one `read_file`.
    pub max_read_lines: usize,
    /// Characters of one shown line before it is cut with `…`.
    pub max_line_chars: usize,
    /// Bytes of one tool output before the rest is cut.
    pub max_output_bytes: usize,
    /// Characters of a regex or glob pattern.
    pub max_pattern_chars: usize,
    /// Size limit of a compiled regex (bounded compile time and memory).
    pub regex_size_limit: usize,
    /// Size limit of the regex's lazy DFA cache.
    pub regex_dfa_size_limit: usize,
}

impl Default for ToolConfig {
    fn default() -> Self {
        Self {
            max_grep_matches: MAX_GREP_MATCHES,
            max_glob_results: MAX_GLOB_RESULTS,
            max_read_lines: MAX_READ_LINES,
            max_line_chars: MAX_LINE_CHARS,
            max_output_bytes: MAX_OUTPUT_BYTES,
            max_pattern_chars: MAX_PATTERN_CHARS,
            regex_size_limit: REGEX_SIZE_LIMIT,
            regex_dfa_size_limit: REGEX_DFA_SIZE_LIMIT,
        }
    }
}

/// The most any cap of [`ToolConfig`] may be (1 GiB of bytes, a billion
/// lines or matches): far above a useful tool output, below an allocation
/// that fails.
pub const MAX_TOOL_CAP: usize = 1 << 30;

impl ToolConfig {
    /// `(field, message)` of the first cap out of range: each must be at
    /// least 1 (a cap of 0 makes every call of its tool fail or show
    /// nothing) and at most [`MAX_TOOL_CAP`].
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        for (field, value) in [
            ("max_grep_matches", self.max_grep_matches),
            ("max_glob_results", self.max_glob_results),
            ("max_read_lines", self.max_read_lines),
            ("max_line_chars", self.max_line_chars),
            ("max_output_bytes", self.max_output_bytes),
            ("max_pattern_chars", self.max_pattern_chars),
            ("regex_size_limit", self.regex_size_limit),
            ("regex_dfa_size_limit", self.regex_dfa_size_limit),
        ] {
            if value == 0 {
                return Err((field, "must be at least 1 (a cap of 0 makes every call of its tool fail or show nothing)".into()));
            }
            if value > MAX_TOOL_CAP {
                return Err((field, format!("must be at most {MAX_TOOL_CAP}, got {value}")));
            }
        }
        Ok(())
    }
}

/// The tools the model may call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolKind {
    /// `grep(pattern, path?, glob?, case_insensitive?)`: regex over contents.
    Grep,
    /// `glob(pattern, path?)`: file paths matching a glob.
    Glob,
    /// `read_file(path, start_line?, end_line?)`: numbered lines of a file.
    ReadFile,
}

impl ToolKind {
    /// Every tool, in the order they are declared to the model.
    pub const ALL: [ToolKind; 3] = [ToolKind::Grep, ToolKind::Glob, ToolKind::ReadFile];

    /// The name the model calls it by.
    pub fn name(self) -> &'static str {
        match self {
            ToolKind::Grep => "grep",
            ToolKind::Glob => "glob",
            ToolKind::ReadFile => "read_file",
        }
    }

    /// The tool called `name`, if any.
    pub fn from_name(name: &str) -> Option<ToolKind> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// What one call returns: the text for the model and the entities it surfaced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The text placed in the `<tool_response>`.
    pub output: String,
    /// Files and functions the output shows (empty on error).
    pub entities: EntitySet,
    /// Whether the call failed (the output is then an error text).
    pub error: bool,
}

impl ToolResult {
    /// A failed call: the error text, no entities.
    pub fn failure(message: impl std::fmt::Display) -> Self {
        Self { output: format!("Error: {message}"), entities: EntitySet::new(), error: true }
    }
}

/// Runs tool calls against snapshots.
#[derive(Clone, Debug, Default)]
pub struct ToolRunner {
    /// The caps.
    pub config: ToolConfig,
}

impl ToolRunner {
    /// A runner with the given caps.
    pub fn new(config: ToolConfig) -> Self {
        Self { config }
    }

    /// Runs one call; never panics and never fails (errors are texts).
    pub fn run(&self, snapshot: &Snapshot, call: &ToolCall) -> ToolResult {
        let attempt = catch_unwind(AssertUnwindSafe(|| self.dispatch(snapshot, call)));
        match attempt {
            Ok(Ok(result)) => result,
            Ok(Err(error)) => ToolResult::failure(error),
            Err(_) => ToolResult::failure(ToolError::Internal(call.name.clone())),
        }
    }

    /// Runs the calls of one turn in parallel; results in call order. A
    /// malformed call yields its parse error as an error text.
    pub fn run_turn(
        &self,
        snapshot: &Snapshot,
        calls: &[Result<ToolCall, ToolCallError>],
    ) -> Vec<ToolResult> {
        calls
            .par_iter()
            .map(|call| match call {
                Ok(call) => self.run(snapshot, call),
                Err(error) => ToolResult::failure(error),
            })
            .collect()
    }

    fn dispatch(&self, snapshot: &Snapshot, call: &ToolCall) -> Result<ToolResult, ToolError> {
        let kind = ToolKind::from_name(&call.name)
            .ok_or_else(|| ToolError::UnknownTool(call.name.clone()))?;
        let args = args::Args::new(kind, &call.arguments);
        match kind {
            ToolKind::Grep => grep::run(snapshot, &args, &self.config),
            ToolKind::Glob => glob::run(snapshot, &args, &self.config),
            ToolKind::ReadFile => read_file::run(snapshot, &args, &self.config),
        }
    }
}
