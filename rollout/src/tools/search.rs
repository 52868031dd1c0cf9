//! `search(query)`: the optional fourth tool (issue 62), the snapshot's
//! [search index](crate::search) asked in words. The query is read as an
//! issue is (identifiers, paths, frames, words); the answer is the ranked
//! files, best first, each with its score and, indented under it, its
//! ranked functions and classes (at most [`FUNCTIONS_PER_FILE`]) with
//! their line spans and scores:
//!
//! ```text
//! src/requests/sessions.py 14.2
//!   SessionRedirectMixin.resolve_redirects 159-285 12.9
//!   Session.send 673-750 7.1
//! src/requests/models.py 8.0
//! ```
//!
//! Bounded like the other three: the query at most
//! [`ToolConfig::max_query_chars`] characters and never binary, at most
//! [`ToolConfig::max_search_results`] files, the output under
//! [`ToolConfig::max_output_bytes`]. The index holds only the snapshot's
//! own files (built once per snapshot and kept, [`IndexCache`]), so nothing
//! outside the snapshot is read; a query costs one pass over the postings
//! of its terms (milliseconds; the first call on a snapshot also builds its
//! index: about 3 s for 3,000 files here).

use super::args::Args;
use super::output::{clip, Output};
use super::{ToolConfig, ToolError, ToolResult};
use crate::entities::{Entity, EntitySet};
use crate::repo::Snapshot;
use crate::search::{IndexCache, Query, SearchConfig, SearchError};

/// Functions shown under one file at most.
pub const FUNCTIONS_PER_FILE: usize = 3;

/// The `search` tool.
pub(super) fn run(
    snapshot: &Snapshot,
    args: &Args,
    config: &ToolConfig,
    search: &SearchConfig,
    indexes: &IndexCache,
) -> Result<ToolResult, ToolError> {
    args.only(&["query"])?;
    let text = args.required_string("query")?;
    let len = text.chars().count();
    if len > config.max_query_chars {
        return Err(ToolError::QueryTooLong { len, max: config.max_query_chars });
    }
    let mut cfg = search.clone();
    cfg.max_results = cfg.max_results.max(config.max_search_results);
    let query = Query::from_issue(text, &cfg).map_err(|e| match e {
        SearchError::BinaryQuery => ToolError::BadQuery("the query holds NUL bytes; give words or names".into()),
        SearchError::EmptyQuery => ToolError::BadQuery(
            "nothing to search for: give names (functions, classes, files) or words of three letters or more".into(),
        ),
        SearchError::QueryTooLong { bytes, max } => ToolError::QueryTooLong { len: bytes, max },
    })?;
    let hits = indexes.get(snapshot).search(&query, &cfg);
    let mut out = Output::new(config.max_output_bytes);
    let mut entities = EntitySet::new();
    if hits.files.is_empty() {
        return Ok(ToolResult { output: "(no match)\n".into(), entities, error: false });
    }
    'files: for f in hits.files.iter().take(config.max_search_results) {
        if !out.push(&clip(&format!("{} {:.1}", f.path, f.score), config.max_line_chars)) {
            break;
        }
        entities.insert(Entity::file(f.path.as_str()));
        for e in hits.entities.iter().filter(|e| e.path == f.path).take(FUNCTIONS_PER_FILE) {
            if !out.push(&clip(&format!("  {} {}-{} {:.1}", e.name, e.start_line, e.end_line, e.score), config.max_line_chars)) {
                break 'files;
            }
            entities.insert(Entity::function(e.path.as_str(), e.name.as_str()));
        }
    }
    let note = out.cut.then(|| format!("[output cut at {} bytes]", config.max_output_bytes));
    Ok(ToolResult { output: out.finish(note), entities, error: false })
}

/// A line of a `search` output.
#[derive(Clone, Debug, PartialEq)]
pub enum ResultLine {
    /// `path score`: a ranked file.
    File { path: String, score: f32 },
    /// `  name start-end score`: one of the file above's ranked functions.
    Function { name: String, start: usize, end: usize, score: f32 },
}

/// Reads one line of a `search` output (`None`: a note or a cut line).
pub fn parse_result_line(line: &str) -> Option<ResultLine> {
    let (head, score) = line.trim_end().rsplit_once(' ')?;
    let score: f32 = score.parse().ok()?;
    match head.strip_prefix("  ") {
        Some(entity) => {
            let (name, span) = entity.rsplit_once(' ')?;
            let (start, end) = span.split_once('-')?;
            Some(ResultLine::Function { name: name.to_string(), start: start.parse().ok()?, end: end.parse().ok()?, score })
        }
        None if !head.contains(' ') => Some(ResultLine::File { path: head.to_string(), score }),
        None => None,
    }
}
