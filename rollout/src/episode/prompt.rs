//! The opening of every episode: the system prompt, the tool schemas
//! declared to the model, and the user turn holding the issue text. With
//! [`ToolConfig::search`] off (the default) both are the three-tool ones,
//! unchanged; on, `search` is declared and named in the system prompt.

use serde_json::{json, Value};

use crate::tools::{ToolConfig, ToolKind};

/// The system prompt of a localization episode.
pub const SYSTEM_PROMPT: &str = "You are a code search agent. Find the files and functions that must change to resolve the issue. \
Call the tools grep, glob and read_file to search the repository; issue several calls in one turn when they are independent. \
When you are done, answer without any tool call: list one entity per line, either a file path (a/b.py) or a function (a/b.py:Class.method or a/b.py:func).";

/// The system prompt when `search` is on.
pub const SYSTEM_PROMPT_WITH_SEARCH: &str = "You are a code search agent. Find the files and functions that must change to resolve the issue. \
Call the tools search, grep, glob and read_file to search the repository: search ranks functions and files for a query of names and words; \
issue several calls in one turn when they are independent. \
When you are done, answer without any tool call: list one entity per line, either a file path (a/b.py) or a function (a/b.py:Class.method or a/b.py:func).";

/// The system prompt of episodes with the tools of `tools`.
pub fn system_prompt(tools: &ToolConfig) -> &'static str {
    if tools.search {
        SYSTEM_PROMPT_WITH_SEARCH
    } else {
        SYSTEM_PROMPT
    }
}

/// JSON schemas of the tools of `tools` ([`ToolConfig::kinds`]), in the
/// order they are declared.
pub fn tool_schemas(tools: &ToolConfig) -> Vec<Value> {
    let kinds = tools.kinds();
    three_tool_schemas()
        .into_iter()
        .chain(kinds.contains(&ToolKind::Search).then(search_schema))
        .collect()
}

/// The schema of `search`.
fn search_schema() -> Value {
    json!({"type": "function", "function": {"name": "search",
        "description": "Rank the repository's functions, classes and files for a query (names, paths, words); prints score path:name start-end, then score path.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "Names and words to look for, e.g. resolve_redirects Session redirect"}},
            "required": ["query"]}}})
}

/// JSON schemas of the three tools, in the order they are declared.
fn three_tool_schemas() -> Vec<Value> {
    let f = |name: &str, description: &str, properties: Value, required: &[&str]| {
        json!({"type": "function", "function": {"name": name, "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required}}})
    };
    vec![
        f(
            "grep",
            "Search file contents with a regular expression; prints path:line:text.",
            json!({"pattern": {"type": "string", "description": "Regular expression"},
                   "path": {"type": "string", "description": "Folder or file to search (default: the whole repository)"},
                   "glob": {"type": "string", "description": "Only files whose path matches this glob, e.g. *.py"},
                   "case_insensitive": {"type": "boolean"}}),
            &["pattern"],
        ),
        f(
            "glob",
            "List files whose path matches a glob pattern.",
            json!({"pattern": {"type": "string", "description": "Glob, e.g. **/*.py"},
                   "path": {"type": "string", "description": "Folder to search under"}}),
            &["pattern"],
        ),
        f(
            "read_file",
            "Read a file with line numbers, optionally a line range.",
            json!({"path": {"type": "string"}, "start_line": {"type": "integer"}, "end_line": {"type": "integer"}}),
            &["path"],
        ),
    ]
}

/// The first two messages of an episode for an issue text, with the tools of `tools`.
pub fn opening_messages(problem_statement: &str, tools: &ToolConfig) -> Vec<Value> {
    vec![
        json!({"role": "system", "content": system_prompt(tools)}),
        json!({"role": "user", "content": format!("Repository issue:\n\n{problem_statement}")}),
    ]
}
