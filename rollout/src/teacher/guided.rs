//! The guided teacher (issue 62, item 4b): the scripted teacher whose
//! reads and answer follow the [search index](crate::search), so that SFT
//! learns from trajectories that find what the index finds, made only of
//! tool calls a model can make.
//!
//! - **With `search` declared** ([`crate::tools::ToolConfig::search`]):
//!   turn 1 calls `search` with a query of the issue's names and words
//!   (and greps its best keyword beside it); turn 2 reads the spans of the
//!   functions `search` ranked first; turn 3 answers, from what it read,
//!   the files `search` scored within the answer gap of the first and each
//!   one's best function (the rule of [`crate::search::Hits::ranking`]).
//! - **With the three tools only** (the FuseSearch recipe): turn 1 greps
//!   the issue's keywords as the scripted teacher does; the teacher then
//!   asks the index privately (it is given the episode's snapshot) and
//!   turn 2 reads the spans of the index's first functions (with the
//!   outline of their files); turn 3 answers as above, from what it read.
//!
//! When the index finds nothing (or `search` fails), the turns are the
//! scripted teacher's own: [`GuidedTeacher`] wraps a
//! [`ScriptedTeacher`] (its variants per episode) and a [`Guide`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::scripted::{format_calls, keywords, split_refine, tool_exchanges, ScriptedConfig, ScriptedTeacher, OUTLINE};
use crate::policy::{Policy, PolicyError, TurnOutput, TurnRequest};
use crate::repo::Snapshot;
use crate::search::{IndexCache, Query, SearchConfig};
use crate::tools::search::{parse_result_line, ResultLine};

/// Lines read from a function's first line at most (the rest of a long
/// one is not needed to name it).
const MAX_SPAN_LINES: usize = 60;
/// Terms in the teacher's `search` query at most.
const QUERY_TERMS: usize = 8;

/// What guides the teacher: the index and how it ranks.
#[derive(Clone)]
pub struct Guide {
    /// Indexes per snapshot (shared with the `search` tool in one process).
    pub indexes: Arc<IndexCache>,
    /// Ranking settings and the answer rule (`answer_gap`, `answer_files`).
    pub search: SearchConfig,
    /// The private ranking of each live episode (three tools only), made
    /// at its read turn and used again at its answer turn (the index may
    /// have left the cache between the two), dropped when it ends.
    rankings: Arc<Mutex<HashMap<u64, Option<Rankings>>>>,
}

/// The ranked functions and files of one episode.
type Rankings = (Vec<Ranked>, Vec<RankedFile>);

impl Guide {
    /// A guide asking `indexes`, ranking by `search`.
    pub fn new(indexes: Arc<IndexCache>, search: SearchConfig) -> Guide {
        Guide { indexes, search, rankings: Arc::default() }
    }

    /// Episode `episode`'s private ranking, made once by `make`.
    fn ranked(&self, episode: u64, make: impl FnOnce() -> Option<Rankings>) -> Option<Rankings> {
        if let Some(r) = self.rankings.lock().unwrap_or_else(|p| p.into_inner()).get(&episode) {
            return r.clone();
        }
        let made = make();
        self.rankings.lock().unwrap_or_else(|p| p.into_inner()).insert(episode, made.clone());
        made
    }

    /// Episode `episode` ended: its ranking is dropped.
    pub fn forget(&self, episode: u64) {
        self.rankings.lock().unwrap_or_else(|p| p.into_inner()).remove(&episode);
    }
}

impl std::fmt::Debug for Guide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guide").field("search", &self.search).finish_non_exhaustive()
    }
}

impl Default for Guide {
    fn default() -> Self {
        Guide::new(IndexCache::shared(), SearchConfig::default())
    }
}

/// The guided teacher: the scripted one (its variants, its turns where the
/// index finds nothing) led by a [`Guide`].
#[derive(Clone, Debug)]
pub struct GuidedTeacher {
    pub scripted: ScriptedTeacher,
    pub guide: Guide,
}

impl GuidedTeacher {
    /// `scripted` guided by `guide`.
    pub fn new(scripted: ScriptedTeacher, guide: Guide) -> GuidedTeacher {
        GuidedTeacher { scripted, guide }
    }
}

impl Policy for GuidedTeacher {
    fn name(&self) -> String {
        "guided".into()
    }

    fn next_turns(&mut self, requests: &[TurnRequest<'_>]) -> Result<Vec<TurnOutput>, PolicyError> {
        Ok(requests
            .iter()
            .map(|r| {
                let config = self.scripted.config_for(r.episode);
                let user = r.messages.iter().find(|m| m["role"] == "user").and_then(|m| m["content"].as_str()).unwrap_or("");
                let guided = turn(&self.guide, &config, r.messages, r.tools, r.snapshot, split_refine(user).0, r.episode);
                TurnOutput::Text(guided.unwrap_or_else(|| super::scripted::turn(&config, r.messages)))
            })
            .collect())
    }

    fn finish(&mut self, episode: u64) {
        self.guide.forget(episode);
    }
}

/// A ranked function as the teacher sees it: from the `search` output or
/// the private index.
#[derive(Clone, Debug, PartialEq)]
struct Ranked {
    score: f32,
    path: String,
    name: String,
    start: usize,
    end: usize,
}

/// A ranked file.
#[derive(Clone, Debug, PartialEq)]
struct RankedFile {
    score: f32,
    path: String,
}

/// The guided turn, or `None` where the scripted teacher's own applies.
fn turn(
    guide: &Guide,
    config: &ScriptedConfig,
    messages: &[Value],
    tools: &[Value],
    snapshot: Option<&Snapshot>,
    issue: &str,
    episode: u64,
) -> Option<String> {
    let issue = issue.strip_prefix("Repository issue:").map_or(issue, str::trim_start);
    let with_search = tools.iter().any(|t| t["function"]["name"] == "search");
    let assistant_turns = messages.iter().filter(|m| m["role"] == "assistant").count();
    let ranked = || if with_search { from_output(messages) } else { guide.ranked(episode, || from_index(guide, snapshot, issue)) };
    match assistant_turns {
        0 if with_search => Some(search_turn(issue, config)),
        0 => None,
        1 => {
            let (functions, _) = ranked()?;
            Some(read_turn(&functions, config, !with_search))
        }
        _ => {
            let (functions, files) = ranked()?;
            Some(answer_turn(guide, &functions, &files, messages))
        }
    }
}

/// The teacher's first turn: a `search` whose query is the issue's best
/// keywords and the file names it writes, as a model could put them, and a
/// grep of the most distinctive one.
fn search_turn(issue: &str, config: &ScriptedConfig) -> String {
    // Distinct, the most telling first.
    let keys = keywords(issue);
    let query = keys.iter().take(QUERY_TERMS).cloned().collect::<Vec<_>>().join(" ");
    let mut calls = vec![json!({"name": "search", "arguments": {"query": if query.is_empty() { issue.chars().take(200).collect() } else { query }}})];
    if let Some(k) = keys.get(config.skip_keywords) {
        calls.push(json!({"name": "grep", "arguments": {"pattern": regex::escape(k)}}));
    }
    format_calls("I will ask the search for the names the issue mentions, and grep the most distinctive one.", &calls)
}

/// Reads of the best functions' spans: at least two, at most `max_files + 1`.
fn read_turn(functions: &[Ranked], config: &ScriptedConfig, outline: bool) -> String {
    let mut calls = Vec::new();
    let mut outlined: Vec<&str> = Vec::new();
    for f in functions.iter().take((config.max_files + 1).max(2)) {
        let end = f.end.min(f.start + MAX_SPAN_LINES - 1).max(f.start);
        calls.push(json!({"name": "read_file", "arguments": {"path": f.path, "start_line": f.start, "end_line": end}}));
        if outline && !outlined.contains(&f.path.as_str()) && outlined.len() < config.max_files {
            outlined.push(&f.path);
            calls.push(json!({"name": "grep", "arguments": {"pattern": OUTLINE, "path": f.path}}));
        }
    }
    format_calls("Reading the functions ranked first.", &calls)
}

/// The files within the answer gap of the first (at most `answer_files`),
/// each with its best function when within the gap of the best one, kept
/// only where the episode read that function or file.
fn answer_turn(guide: &Guide, functions: &[Ranked], files: &[RankedFile], messages: &[Value]) -> String {
    let read: Vec<(String, usize)> = tool_exchanges(messages)
        .into_iter()
        .filter(|(c, out)| c["name"] == "read_file" && !out.starts_with("Error:"))
        .filter_map(|(c, _)| Some((c["arguments"]["path"].as_str()?.to_string(), c["arguments"]["start_line"].as_u64().unwrap_or(1) as usize)))
        .collect();
    let cfg = &guide.search;
    let first = files.first().map_or(0.0, |f| f.score);
    let best_function = functions.first().map_or(0.0, |f| f.score);
    let mut lines = Vec::new();
    for f in files.iter().take(cfg.answer_files.max(1)).filter(|f| f.score >= cfg.answer_gap * first) {
        if !read.iter().any(|(p, _)| *p == f.path) {
            continue;
        }
        lines.push(f.path.clone());
        let best = functions.iter().find(|e| e.path == f.path).filter(|e| e.score >= cfg.answer_gap * best_function);
        if let Some(e) = best.filter(|e| read.iter().any(|(p, s)| *p == e.path && *s == e.start)) {
            lines.push(format!("{}:{}", e.path, e.name));
        }
    }
    if lines.is_empty() {
        // Nothing answered was read: the read functions' files, best first.
        for (p, _) in &read {
            if !lines.contains(p) {
                lines.push(p.clone());
            }
        }
        lines.truncate(1);
    }
    lines.join("\n")
}

/// The ranked functions and files of the episode's `search` calls (the
/// first that answered).
fn from_output(messages: &[Value]) -> Option<Rankings> {
    let out = tool_exchanges(messages).into_iter().find(|(c, out)| c["name"] == "search" && !out.starts_with("Error:"))?.1;
    let mut functions = Vec::new();
    let mut files: Vec<RankedFile> = Vec::new();
    for line in out.lines() {
        match parse_result_line(line) {
            Some(ResultLine::File { path, score }) => files.push(RankedFile { score, path }),
            Some(ResultLine::Function { name, start, end, score }) => {
                if let Some(file) = files.last() {
                    functions.push(Ranked { score, path: file.path.clone(), name, start, end });
                }
            }
            None => {}
        }
    }
    functions.sort_by(|a, b| b.score.total_cmp(&a.score));
    (!functions.is_empty()).then_some((functions, files))
}

/// The index's ranking of the issue (the teacher's private guide).
fn from_index(guide: &Guide, snapshot: Option<&Snapshot>, issue: &str) -> Option<Rankings> {
    let snapshot = snapshot?;
    let query = Query::from_issue(issue, &guide.search).ok()?;
    let hits = guide.indexes.get(snapshot).search(&query, &guide.search);
    let functions: Vec<Ranked> = hits
        .entities
        .iter()
        .map(|e| Ranked { score: e.score, path: e.path.clone(), name: e.name.clone(), start: e.start_line, end: e.end_line })
        .collect();
    let files: Vec<RankedFile> = hits.files.iter().map(|f| RankedFile { score: f.score, path: f.path.clone() }).collect();
    (!functions.is_empty() && !files.is_empty()).then_some((functions, files))
}
