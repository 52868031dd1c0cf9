//! Tool failures: each becomes `Error: <message>` for the model.

use thiserror::Error;

use crate::repo::path::PathError;

/// Why a tool call failed. The message is written for the model.
#[derive(Debug, Error)]
pub enum ToolError {
    /// No tool has this name.
    #[error("unknown tool '{name}'; the tools are {tools}")]
    UnknownTool {
        /// The name called.
        name: String,
        /// The tools of this episode, comma-separated.
        tools: String,
    },
    /// A required argument is absent.
    #[error("{tool}: missing required argument '{arg}'")]
    MissingArgument {
        /// The tool.
        tool: &'static str,
        /// The argument.
        arg: &'static str,
    },
    /// An argument has the wrong JSON type or value.
    #[error("{tool}: argument '{arg}' must be {expected}")]
    WrongType {
        /// The tool.
        tool: &'static str,
        /// The argument.
        arg: String,
        /// What was expected.
        expected: &'static str,
    },
    /// An argument the tool does not take.
    #[error("{tool}: unknown argument '{arg}'; it takes {allowed}")]
    UnknownArgument {
        /// The tool.
        tool: &'static str,
        /// The argument given.
        arg: String,
        /// The arguments it takes.
        allowed: String,
    },
    /// The path was refused (absolute, `..`, control characters).
    #[error("{0}")]
    BadPath(#[from] PathError),
    /// Nothing at this path in the repository.
    #[error("'{0}' does not exist in the repository")]
    NotFound(String),
    /// A directory where a file was expected.
    #[error("'{0}' is a directory; use glob to list it")]
    IsDirectory(String),
    /// A file where a directory was expected.
    #[error("'{0}' is a file, not a directory")]
    NotADirectory(String),
    /// A binary file cannot be shown.
    #[error("'{path}' is a binary file ({size} bytes) and cannot be shown")]
    Binary {
        /// The file.
        path: String,
        /// Its size.
        size: usize,
    },
    /// A file above the snapshot's size limit.
    #[error("'{path}' is too large to read ({size} bytes)")]
    TooLarge {
        /// The file.
        path: String,
        /// Its size.
        size: usize,
    },
    /// A symbolic link, which is never followed.
    #[error("'{path}' is a symbolic link to '{target}'{outside} (links are not followed)")]
    Symlink {
        /// The link.
        path: String,
        /// Its target text.
        target: String,
        /// ", out of the repository" when the target leaves it, else "".
        outside: &'static str,
    },
    /// A path beneath a symbolic link (to a folder), which is never followed.
    #[error("'{path}' is beneath '{link}', a symbolic link to '{target}'{outside} (links are not followed)")]
    BeneathSymlink {
        /// The path asked for.
        path: String,
        /// The link on its way.
        link: String,
        /// The link's target text.
        target: String,
        /// ", out of the repository" when the target leaves it, else "".
        outside: &'static str,
    },
    /// A submodule, whose files are not in this repository.
    #[error("'{path}' is a submodule (commit {commit}); its files are not available")]
    Submodule {
        /// The submodule path.
        path: String,
        /// Its pinned commit.
        commit: String,
    },
    /// A file whose contents this clone of the repository does not hold.
    #[error("'{path}': its contents are not in this clone of the repository")]
    Missing {
        /// The file.
        path: String,
    },
    /// The regex does not compile (syntax, size limit, a literal newline).
    #[error("invalid regex '{pattern}': {message}")]
    InvalidRegex {
        /// The pattern.
        pattern: String,
        /// The regex engine's message.
        message: String,
    },
    /// The glob does not compile.
    #[error("invalid glob '{pattern}': {message}")]
    InvalidGlob {
        /// The pattern.
        pattern: String,
        /// globset's message.
        message: String,
    },
    /// A pattern above the length cap.
    #[error("pattern is {len} characters long; the limit is {max}")]
    PatternTooLong {
        /// Its length.
        len: usize,
        /// The cap.
        max: usize,
    },
    /// `end_line` before `start_line`.
    #[error("end_line {end} is before start_line {start}: give start_line <= end_line")]
    LineRangeReversed {
        /// Requested first line.
        start: usize,
        /// Requested last line.
        end: usize,
    },
    /// `start_line` beyond the file.
    #[error("line range {start}..{end} is out of bounds: '{path}' has {lines} lines")]
    LineOutOfRange {
        /// The file.
        path: String,
        /// Requested first line.
        start: usize,
        /// Requested last line.
        end: usize,
        /// Lines in the file.
        lines: usize,
    },
    /// A `search` query longer than the cap.
    #[error("search: the query is {len} characters long; the limit is {max}")]
    QueryTooLong {
        /// Characters given.
        len: usize,
        /// The cap.
        max: usize,
    },
    /// A `search` query with nothing to search for, or not text.
    #[error("search: {0}")]
    BadQuery(String),
    /// A bug caught at the boundary (a panic inside the tool).
    #[error("internal error while running '{0}'")]
    Internal(String),
}
