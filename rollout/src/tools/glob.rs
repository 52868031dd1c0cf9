//! `glob(pattern, path?)`: repo paths matching a glob, sorted.

use globset::{GlobBuilder, GlobMatcher};

use super::args::Args;
use super::output::{check_pattern, Output};
use super::{ToolConfig, ToolError, ToolResult};
use crate::entities::{Entity, EntitySet};
use crate::repo::{path, Snapshot};

/// Compiles a glob (`*` stays within one path component, `**` crosses them).
pub(super) fn compile_glob(pattern: &str) -> Result<GlobMatcher, ToolError> {
    check_pattern(pattern, super::MAX_PATTERN_CHARS)?;
    let trimmed = pattern.trim().trim_start_matches("./");
    if trimmed.starts_with('/') {
        return Err(path::PathError::Absolute(pattern.to_string()).into());
    }
    if trimmed.split('/').any(|part| part == "..") {
        return Err(path::PathError::Escapes(pattern.to_string()).into());
    }
    GlobBuilder::new(trimmed)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| ToolError::InvalidGlob { pattern: pattern.to_string(), message: e.kind().to_string() })
}

/// The `glob` tool: `pattern` is matched against paths relative to `path`.
pub(super) fn run(snapshot: &Snapshot, args: &Args, config: &ToolConfig) -> Result<ToolResult, ToolError> {
    args.only(&["pattern", "path"])?;
    let pattern = args.required_string("pattern")?;
    check_pattern(pattern, config.max_pattern_chars)?;
    let dir = path::normalize(args.string("path")?.unwrap_or(""))?;
    let glob = compile_glob(pattern)?;
    if snapshot.file(&dir).is_some() {
        return Err(ToolError::NotADirectory(dir));
    }
    if !snapshot.is_dir(&dir) {
        return Err(ToolError::NotFound(dir));
    }
    let skip = if dir.is_empty() { 0 } else { dir.len() + 1 };
    let matches: Vec<&str> = snapshot
        .files_under(&dir)
        .iter()
        .map(|f| f.path.as_str())
        .filter(|p| glob.is_match(&p[skip..]))
        .collect();
    Ok(render(&matches, config))
}

fn render(matches: &[&str], config: &ToolConfig) -> ToolResult {
    if matches.is_empty() {
        return ToolResult { output: "No files matched.\n".into(), entities: EntitySet::new(), error: false };
    }
    let mut out = Output::new(config.max_output_bytes);
    let mut entities = EntitySet::new();
    for path in matches.iter().take(config.max_glob_results) {
        if !out.push(&path::quote(path)) {
            break;
        }
        entities.insert(Entity::file(*path));
    }
    let shown = entities.len();
    let note = (shown < matches.len()).then(|| {
        format!("[truncated: showing {shown} of {} files; narrow the pattern or path]", matches.len())
    });
    ToolResult { output: out.finish(note), entities, error: false }
}
