//! `grep(pattern, path?, glob?, case_insensitive?)` with ripgrep's own
//! search crates over in-memory contents, files searched in parallel.

use globset::GlobMatcher;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{sinks::Lossy, BinaryDetection, Searcher, SearcherBuilder};
use rayon::prelude::*;

use super::args::Args;
use super::glob::compile_glob;
use super::output::{check_pattern, clip, Output};
use super::{ToolConfig, ToolError, ToolResult};
use crate::entities::{Entity, EntitySet};
use crate::repo::{path, FileEntry, Snapshot};

/// Files searched per parallel batch; the search stops after the batch that
/// passes the match cap, so results stay in path order.
const FILES_PER_BATCH: usize = 512;

/// A compiled grep over part of a snapshot.
pub struct GrepQuery<'s> {
    matcher: RegexMatcher,
    files: Vec<&'s FileEntry>,
}

/// The matches in one file: (1-based line, line text without newline).
pub type FileMatches<'s> = (&'s FileEntry, Vec<(u64, String)>);

impl<'s> GrepQuery<'s> {
    /// Compiles `pattern` (ripgrep's regex dialect; never matches across a
    /// newline) for the text files at or under `dir` whose path matches `glob`.
    pub fn new(
        snapshot: &'s Snapshot,
        pattern: &str,
        case_insensitive: bool,
        dir: &str,
        glob: Option<&GlobMatcher>,
        config: &ToolConfig,
    ) -> Result<Self, ToolError> {
        check_pattern(pattern, config.max_pattern_chars)?;
        let matcher = RegexMatcherBuilder::new()
            .case_insensitive(case_insensitive)
            .line_terminator(Some(b'\n'))
            .size_limit(config.regex_size_limit)
            .dfa_size_limit(config.regex_dfa_size_limit)
            .build(pattern)
            .map_err(|e| ToolError::InvalidRegex { pattern: pattern.to_string(), message: e.to_string() })?;
        let files = scope(snapshot, dir)?
            .iter()
            .filter(|f| f.text().is_some())
            .filter(|f| glob.is_none_or(|g| glob_matches(g, &f.path)))
            .collect();
        Ok(Self { matcher, files })
    }
}

/// A glob without `/` matches the file name anywhere (ripgrep's `-g`);
/// one with `/` matches the whole repo-relative path.
fn glob_matches(glob: &GlobMatcher, path: &str) -> bool {
    if glob.glob().glob().contains('/') {
        glob.is_match(path)
    } else {
        glob.is_match(path.rsplit('/').next().unwrap_or(path))
    }
}

/// The entries at `dir`: the whole tree, one file, or a directory's files.
pub(super) fn scope<'s>(snapshot: &'s Snapshot, dir: &str) -> Result<&'s [FileEntry], ToolError> {
    if let Some(file) = snapshot.file(dir) {
        return Ok(std::slice::from_ref(file));
    }
    if snapshot.is_dir(dir) {
        return Ok(snapshot.files_under(dir));
    }
    Err(ToolError::NotFound(dir.to_string()))
}

/// Runs the query in path order until more than `limit` matching lines are
/// found (`usize::MAX` for all); returns the files with matches.
pub fn grep_matches<'s>(query: &GrepQuery<'s>, limit: usize) -> Vec<FileMatches<'s>> {
    let mut found = Vec::new();
    let mut total = 0usize;
    for batch in query.files.chunks(FILES_PER_BATCH) {
        let results: Vec<FileMatches<'s>> = batch
            .par_iter()
            .map_init(new_searcher, |searcher, file| (*file, search_file(searcher, &query.matcher, file, limit)))
            .filter(|(_, lines)| !lines.is_empty())
            .collect();
        total += results.iter().map(|(_, l)| l.len()).sum::<usize>();
        found.extend(results);
        if total > limit {
            break;
        }
    }
    found
}

fn new_searcher() -> Searcher {
    SearcherBuilder::new().line_number(true).binary_detection(BinaryDetection::none()).build()
}

fn search_file(searcher: &mut Searcher, matcher: &RegexMatcher, file: &FileEntry, limit: usize) -> Vec<(u64, String)> {
    let mut lines = Vec::new();
    let bytes = file.text().unwrap_or_default();
    let sink = Lossy(|line_number, line: &str| {
        lines.push((line_number, line.trim_end_matches(['\n', '\r']).to_string()));
        Ok(lines.len() <= limit)
    });
    // Searching a slice with a sink that never errors cannot fail.
    let _ = searcher.search_slice(matcher, bytes, sink);
    lines
}

/// The `grep` tool.
pub(super) fn run(snapshot: &Snapshot, args: &Args, config: &ToolConfig) -> Result<ToolResult, ToolError> {
    args.only(&["pattern", "path", "glob", "case_insensitive"])?;
    let pattern = args.required_string("pattern")?;
    let dir = path::normalize(args.string("path")?.unwrap_or(""))?;
    let glob = args.string("glob")?.map(compile_glob).transpose()?;
    let case_insensitive = args.flag("case_insensitive")?.unwrap_or(false);
    refuse_non_text(snapshot, &dir)?;
    let query = GrepQuery::new(snapshot, pattern, case_insensitive, &dir, glob.as_ref(), config)?;
    let found = grep_matches(&query, config.max_grep_matches);
    Ok(render(&found, config))
}

/// Grep on one non-text file is an error, not an empty result.
fn refuse_non_text(snapshot: &Snapshot, dir: &str) -> Result<(), ToolError> {
    match snapshot.file(dir) {
        Some(file) if !dir.is_empty() => super::read_file::require_text(file).map(|_| ()),
        _ => Ok(()),
    }
}

fn render(found: &[FileMatches], config: &ToolConfig) -> ToolResult {
    let total: usize = found.iter().map(|(_, l)| l.len()).sum();
    if total == 0 {
        return ToolResult { output: "No matches found.\n".into(), entities: EntitySet::new(), error: false };
    }
    let mut out = Output::new(config.max_output_bytes);
    let mut entities = EntitySet::new();
    let mut shown = 0usize;
    'files: for (file, lines) in found {
        for (line_number, text) in lines {
            if shown == config.max_grep_matches {
                break 'files;
            }
            let line = format!("{}:{}:{}", path::quote(&file.path), line_number, clip(text, config.max_line_chars));
            if !out.push(&line) {
                break 'files;
            }
            shown += 1;
            entities.insert(Entity::file(&file.path));
            if let Some(owner) = file.spans().and_then(|s| s.owner(*line_number as usize)) {
                entities.insert(Entity::function(&file.path, owner));
            }
        }
    }
    let note = (shown < total).then(|| {
        let max = config.max_grep_matches;
        let of = if total > max { format!("more than {max}") } else { total.to_string() };
        format!("[truncated: showing {shown} of {of} matches; narrow the pattern, path or glob]")
    });
    ToolResult { output: out.finish(note), entities, error: false }
}
