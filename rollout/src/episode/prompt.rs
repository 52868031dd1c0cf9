//! The opening of every episode: the system prompt, the tool schemas
//! declared to the model, and the user turn holding the issue text.

use serde_json::{json, Value};

/// The system prompt of a localization episode.
pub const SYSTEM_PROMPT: &str = "You are a code search agent. Find the files and functions that must change to resolve the issue. \
Call the tools grep, glob and read_file to search the repository; issue several calls in one turn when they are independent. \
When you are done, answer without any tool call: list one entity per line, either a file path (a/b.py) or a function (a/b.py:Class.method or a/b.py:func).";

/// JSON schemas of the three tools, in the order they are declared.
pub fn tool_schemas() -> Vec<Value> {
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

/// The first two messages of an episode for an issue text.
pub fn opening_messages(problem_statement: &str) -> Vec<Value> {
    vec![
        json!({"role": "system", "content": SYSTEM_PROMPT}),
        json!({"role": "user", "content": format!("Repository issue:\n\n{problem_statement}")}),
    ]
}
