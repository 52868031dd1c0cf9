//! The three read-only tools (`grep`, `glob`, `read_file`) over a
//! [`Snapshot`], and the optional fourth, `search`
//! (the snapshot's [search index](crate::search), on with
//! [`ToolConfig::search`]): deterministic (sorted), bounded by
//! [`ToolConfig`] caps with a visible truncation note, and total: every
//! failure becomes an error text for the model with an empty entity set.

mod args;
mod error;
mod glob;
mod grep;
mod output;
mod read_file;
pub mod search;

pub use error::ToolError;
pub use grep::{grep_matches, GrepQuery};

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::entities::EntitySet;
use crate::repo::Snapshot;
use crate::search::{IndexCache, SearchConfig};
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
/// Default [`ToolConfig::max_search_results`].
pub const MAX_SEARCH_RESULTS: usize = 10;
/// Default [`ToolConfig::max_query_chars`].
pub const MAX_QUERY_CHARS: usize = 1000;

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
    /// Declare the fourth tool, `search` (the index, issue 62), to the
    /// model; off by default, so the three-tool recipe is unchanged.
    pub search: bool,
    /// Functions and files shown by one `search` (each).
    pub max_search_results: usize,
    /// Characters of a `search` query.
    pub max_query_chars: usize,
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
            search: false,
            max_search_results: MAX_SEARCH_RESULTS,
            max_query_chars: MAX_QUERY_CHARS,
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
            ("max_search_results", self.max_search_results),
            ("max_query_chars", self.max_query_chars),
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

    /// The tools declared to the model, in order: the three, then `search`
    /// when on.
    pub fn kinds(&self) -> Vec<ToolKind> {
        let mut kinds = ToolKind::ALL.to_vec();
        if self.search {
            kinds.push(ToolKind::Search);
        }
        kinds
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
    /// `search(query)`: the index's ranked functions and files (optional).
    Search,
}

impl ToolKind {
    /// The three tools every episode has, in the order they are declared.
    pub const ALL: [ToolKind; 3] = [ToolKind::Grep, ToolKind::Glob, ToolKind::ReadFile];

    /// The name the model calls it by.
    pub fn name(self) -> &'static str {
        match self {
            ToolKind::Grep => "grep",
            ToolKind::Glob => "glob",
            ToolKind::ReadFile => "read_file",
            ToolKind::Search => "search",
        }
    }

    /// The tool called `name`, if any (of all four).
    pub fn from_name(name: &str) -> Option<ToolKind> {
        Self::ALL.into_iter().chain([ToolKind::Search]).find(|k| k.name() == name)
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
#[derive(Clone, Default)]
pub struct ToolRunner {
    /// The caps, and whether `search` is on.
    pub config: ToolConfig,
    /// How `search` ranks (a run config's `[search]`).
    pub search: SearchConfig,
    /// The indexes `search` asks, one per snapshot, built on first use.
    pub indexes: Arc<IndexCache>,
}

impl std::fmt::Debug for ToolRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRunner").field("config", &self.config).field("search", &self.search).finish_non_exhaustive()
    }
}

impl ToolRunner {
    /// A runner with the given caps (`search`, when on, ranks by the
    /// default [`SearchConfig`] with its own index cache).
    pub fn new(config: ToolConfig) -> Self {
        Self { config, search: SearchConfig::default(), indexes: Arc::default() }
    }

    /// The same runner whose `search` ranks by `search` over `indexes`
    /// (shared with the other users of the index in one process).
    pub fn with_search(self, search: SearchConfig, indexes: Arc<IndexCache>) -> Self {
        Self { search, indexes, ..self }
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
        let unknown = || {
            let names: Vec<&str> = self.config.kinds().iter().map(|k| k.name()).collect();
            ToolError::UnknownTool { name: call.name.clone(), tools: names.join(", ") }
        };
        let kind = ToolKind::from_name(&call.name).filter(|k| self.config.kinds().contains(k)).ok_or_else(unknown)?;
        let args = args::Args::new(kind, &call.arguments);
        match kind {
            ToolKind::Grep => grep::run(snapshot, &args, &self.config),
            ToolKind::Glob => glob::run(snapshot, &args, &self.config),
            ToolKind::ReadFile => read_file::run(snapshot, &args, &self.config),
            ToolKind::Search => search::run(snapshot, &args, &self.config, &self.search, &self.indexes),
        }
    }
}
