//! The scripted teacher: no model, only the conversation.
//!
//! Turn 1: pull identifiers and phrases out of the issue text (backticked
//! code, snake_case and CamelCase names, dotted paths, quoted messages) and
//! grep for the most distinctive ones in parallel (plus a glob for file
//! names it mentions). Turn 2: rank files by rarity-weighted hits and read
//! the region around the hits of the best ones, in parallel. Turn 3: answer
//! with those files and the functions (`def`, within their `class`) that
//! enclose the hits in what it read.

use crate::policy::{Policy, PolicyError, TurnOutput, TurnRequest};
use crate::toolcall::{render_tool_calls, ToolCall};
use regex::Regex;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

/// Knobs of the scripted teacher.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedConfig {
    /// Grep calls in the first turn at most.
    pub max_greps: usize,
    /// Files read (and answered) at most.
    pub max_files: usize,
    /// Lines read above the first hit and below the last.
    pub context_lines: usize,
    /// Best keywords left out of the first turn's greps.
    pub skip_keywords: usize,
}

impl Default for ScriptedConfig {
    fn default() -> Self {
        ScriptedConfig { max_greps: 4, max_files: 2, context_lines: 30, skip_keywords: 0 }
    }
}

impl ScriptedConfig {
    /// A variant drawn from `seed` and the episode key: how many greps, files
    /// and lines of context, and whether the best keyword is skipped. The
    /// same (seed, episode) always gives the same variant, whatever the batch.
    pub fn varied(seed: u64, episode: u64) -> ScriptedConfig {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ episode.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        ScriptedConfig {
            max_greps: rng.random_range(2..=5),
            max_files: rng.random_range(1..=3),
            context_lines: [8, 15, 25, 35][rng.random_range(0..4)],
            skip_keywords: usize::from(rng.random_bool(0.25)),
        }
    }
}

/// The scripted teacher policy.
#[derive(Debug, Clone, Default)]
pub struct ScriptedTeacher {
    pub config: ScriptedConfig,
    /// With a seed, each episode gets its own [`ScriptedConfig::varied`]
    /// (several distinct trajectories per task for `fusegrpo synth`).
    pub variation: Option<u64>,
}

impl ScriptedTeacher {
    /// A teacher whose episodes vary with `seed` (see [`ScriptedConfig::varied`]).
    pub fn varied(seed: u64) -> ScriptedTeacher {
        ScriptedTeacher { config: ScriptedConfig::default(), variation: Some(seed) }
    }

    pub(super) fn config_for(&self, episode: u64) -> ScriptedConfig {
        self.variation.map_or_else(|| self.config.clone(), |seed| ScriptedConfig::varied(seed, episode))
    }
}

impl Policy for ScriptedTeacher {
    fn name(&self) -> String {
        "scripted".into()
    }

    fn next_turns(&mut self, requests: &[TurnRequest<'_>]) -> Result<Vec<TurnOutput>, PolicyError> {
        Ok(requests.iter().map(|r| TurnOutput::Text(turn(&self.config_for(r.episode), r.messages))).collect())
    }
}

static IDENT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*").expect("valid regex"));
static BACKTICK: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"`([^`\n]{3,80})`").expect("valid regex"));
static QUOTED: LazyLock<Regex> = LazyLock::new(|| Regex::new(r#""([^"\n]{12,80})"|'([^'\n]{12,80})'"#).expect("valid regex"));
static SHORT_QUOTED: LazyLock<Regex> = LazyLock::new(|| Regex::new(r#""([^"\s]{4,40})"|'([^'\s]{4,40})'"#).expect("valid regex"));
/// Outline pattern: every def/class line (grep'd per file to name functions).
pub(super) const OUTLINE: &str = r"^\s*(async\s+)?(def|class)\s";
static FILE_NAME: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b([\w/]+\.(?:py|rs|go|js|ts|java))\b").expect("valid regex"));
static GREP_LINE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^([^:\n]+):(\d+):").expect("valid regex"));
static READ_LINE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^(\d+)\t(.*)$").expect("valid regex"));
static DEF: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^(\s*)(?:async\s+)?def\s+(\w+)").expect("valid regex"));
static CLASS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^(\s*)class\s+(\w+)").expect("valid regex"));

const COMMON: &[&str] = &[
    "that", "this", "with", "from", "have", "when", "should", "would", "there", "which", "where", "what", "will",
    "into", "then", "than", "they", "them", "their", "about", "because", "return", "returns", "value", "values",
    "error", "issue", "example", "instead", "without", "function", "method", "class", "using", "after", "before",
    "could", "does", "doesn", "like", "also", "just", "only", "some", "other", "these", "those", "here", "file",
];

/// The next turn of a conversation: search, read, then answer.
pub(super) fn turn(config: &ScriptedConfig, messages: &[Value]) -> String {
    let assistant_turns = messages.iter().filter(|m| m["role"] == "assistant").count();
    let issue = messages.iter().find(|m| m["role"] == "user").and_then(|m| m["content"].as_str()).unwrap_or("");
    let turns = Turns { config };
    match assistant_turns {
        0 => {
            let (issue, earlier) = split_refine(issue);
            turns.search_turn(issue, &earlier)
        }
        1 => turns.read_turn(messages),
        _ => turns.answer_turn(messages),
    }
}

/// The three turns under one [`ScriptedConfig`].
struct Turns<'a> {
    config: &'a ScriptedConfig,
}

impl Turns<'_> {

    /// Greps for the issue's keywords; in a refine attempt (`earlier`: the
    /// earlier attempt's answered functions), for those functions' names first.
    fn search_turn(&self, issue: &str, earlier: &[String]) -> String {
        let mut names: Vec<String> = earlier.iter().take(MAX_EARLIER.min(self.config.max_greps)).cloned().collect();
        for k in keywords(issue).into_iter().skip(self.config.skip_keywords) {
            if names.len() >= self.config.max_greps {
                break;
            }
            if !names.contains(&k) {
                names.push(k);
            }
        }
        let mut calls: Vec<Value> =
            names.iter().map(|k| json!({"name": "grep", "arguments": {"pattern": regex::escape(k)}})).collect();
        if let Some(m) = FILE_NAME.captures(issue) {
            let name = m[1].rsplit('/').next().unwrap_or(&m[1]).to_string();
            calls.push(json!({"name": "glob", "arguments": {"pattern": format!("**/{name}")}}));
        }
        if calls.is_empty() {
            calls.push(json!({"name": "glob", "arguments": {"pattern": "**/*.py"}}));
        }
        format_calls("I will search for the names the issue mentions.", &calls)
    }

    fn read_turn(&self, messages: &[Value]) -> String {
        let hits = grep_hits(messages);
        let calls: Vec<Value> = ranked_files(&hits)
            .into_iter()
            .take(self.config.max_files)
            .flat_map(|(path, lines)| {
                let first = lines.iter().min().copied().unwrap_or(1);
                let last = lines.iter().max().copied().unwrap_or(first);
                let start = first.saturating_sub(self.config.context_lines).max(1);
                let end = (last + self.config.context_lines / 3).max(start);
                [
                    json!({"name": "read_file", "arguments": {"path": path, "start_line": start, "end_line": end}}),
                    json!({"name": "grep", "arguments": {"pattern": OUTLINE, "path": path}}),
                ]
            })
            .collect();
        if calls.is_empty() {
            return "I found nothing relevant.".into();
        }
        format_calls("Reading the most relevant matches.", &calls)
    }

    fn answer_turn(&self, messages: &[Value]) -> String {
        let hits = grep_hits(messages);
        let mut reads = read_outputs(messages);
        for (path, lines) in outlines(messages) {
            reads.entry(path).or_default().extend(lines);
        }
        let mut lines = Vec::new();
        for (path, hit_lines) in ranked_files(&hits).into_iter().take(self.config.max_files) {
            lines.push(path.clone());
            if let Some(text) = reads.get(&path) {
                let mut funcs: Vec<String> = hit_lines.iter().filter_map(|&l| enclosing_function(text, l)).collect();
                funcs.sort();
                funcs.dedup();
                lines.extend(funcs.into_iter().map(|f| format!("{path}:{f}")));
            }
        }
        lines.join("\n")
    }
}

/// Earlier answered functions a refine attempt checks first, at most.
const MAX_EARLIER: usize = 2;

/// A refine attempt's prompt (see [`crate::scaling::refine_task`]): the
/// issue before the earlier attempt's summary, and the last name component
/// of each function that attempt answered.
pub(super) fn split_refine(text: &str) -> (&str, Vec<String>) {
    let Some((issue, summary)) = text.split_once(crate::scaling::REFINE_HEADER) else {
        return (text, Vec::new());
    };
    let answer = summary.rsplit_once("\nAnswer:\n").map_or("", |(_, a)| a);
    let names = answer
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .filter_map(|l| l.split(' ').next())
        .filter_map(|e| e.split_once(':').map(|(_, f)| f.rsplit('.').next().unwrap_or(f).to_string()))
        .collect();
    (issue.trim_end(), names)
}

/// Distinctive search terms of an issue text, best first.
pub fn keywords(issue: &str) -> Vec<String> {
    let mut scored: BTreeMap<String, i32> = BTreeMap::new();
    let mut add = |k: &str, s: i32| {
        let e = scored.entry(k.to_string()).or_insert(0);
        *e = (*e).max(s);
    };
    for c in BACKTICK.captures_iter(issue) {
        let code = c[1].trim();
        match IDENT.find(code) {
            // A (dotted) name: search its last component.
            Some(m) if m.as_str() == code => {
                let last = code.rsplit('.').next().unwrap_or(code);
                if last.len() >= 4 {
                    add(last, 6);
                }
            }
            // Anything else (a header, an expression): search it literally.
            _ => add(code, 6),
        }
    }
    for c in QUOTED.captures_iter(issue) {
        let phrase = c.get(1).or_else(|| c.get(2)).map_or("", |m| m.as_str());
        add(phrase, if phrase.contains(' ') { 5 } else { 4 });
    }
    for c in SHORT_QUOTED.captures_iter(issue) {
        let word = c.get(1).or_else(|| c.get(2)).map_or("", |m| m.as_str());
        if word.len() >= 4 && !word.contains(' ') {
            add(word, 4);
        }
    }
    for m in IDENT.find_iter(issue) {
        let word = m.as_str().rsplit('.').next().unwrap_or(m.as_str());
        if word.len() < 4 || COMMON.contains(&word.to_lowercase().as_str()) {
            continue;
        }
        let snake = word.contains('_');
        let camel = word.chars().skip(1).any(char::is_uppercase) && word.chars().any(char::is_lowercase);
        let dotted = m.as_str().contains('.');
        let score = 2 * snake as i32 + 2 * camel as i32 + dotted as i32;
        if score > 0 {
            add(word, score + (word.len() > 10) as i32);
        } else if word.len() >= 7 && word.chars().all(|c| c.is_ascii_lowercase()) {
            // Plain words only as a last resort.
            add(word, 0);
        }
    }
    let mut v: Vec<(String, i32)> = scored.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.len().cmp(&a.0.len())).then(a.0.cmp(&b.0)));
    v.into_iter().map(|(k, _)| k).collect()
}

pub(super) fn format_calls(preamble: &str, calls: &[Value]) -> String {
    let calls: Vec<ToolCall> = calls
        .iter()
        .map(|c| ToolCall {
            name: c["name"].as_str().unwrap_or_default().to_string(),
            arguments: c["arguments"].as_object().cloned().unwrap_or_default(),
        })
        .collect();
    render_tool_calls(preamble, &calls)
}

/// (call arguments, output) of every tool response, in order.
pub(super) fn tool_exchanges(messages: &[Value]) -> Vec<(Value, String)> {
    let mut calls = Vec::new();
    let mut outputs = Vec::new();
    for m in messages {
        if m["role"] == "assistant" {
            for c in m["tool_calls"].as_array().into_iter().flatten() {
                calls.push(c["function"].clone());
            }
        } else if m["role"] == "tool" {
            outputs.push(m["content"].as_str().unwrap_or("").to_string());
        }
    }
    calls.into_iter().zip(outputs).collect()
}

/// Per search grep (outline greps excluded): file -> hit lines (a call's hits weigh 1 / files it hit).
fn grep_hits(messages: &[Value]) -> Vec<HashMap<String, Vec<usize>>> {
    tool_exchanges(messages)
        .into_iter()
        .filter(|(c, _)| c["name"] == "grep" && c["arguments"]["pattern"] != OUTLINE)
        .map(|(_, out)| {
            let mut files: HashMap<String, Vec<usize>> = HashMap::new();
            for line in out.lines() {
                if let Some(c) = GREP_LINE.captures(line) {
                    files.entry(c[1].to_string()).or_default().push(c[2].parse().unwrap_or(1));
                }
            }
            files
        })
        .collect()
}


/// File -> its def/class lines, from outline greps.
fn outlines(messages: &[Value]) -> HashMap<String, BTreeMap<usize, String>> {
    let mut out: HashMap<String, BTreeMap<usize, String>> = HashMap::new();
    for (c, text) in tool_exchanges(messages) {
        if c["name"] != "grep" || c["arguments"]["pattern"] != OUTLINE {
            continue;
        }
        for line in text.lines() {
            if let Some(m) = GREP_LINE.captures(line) {
                let rest = &line[m.get(0).map_or(0, |g| g.end())..];
                out.entry(m[1].to_string()).or_default().insert(m[2].parse().unwrap_or(0), rest.to_string());
            }
        }
    }
    out
}

/// How much a file's hits count: source over tests over docs.
fn file_weight(path: &str) -> f64 {
    let name = path.rsplit('/').next().unwrap_or(path);
    if !crate::tasks::gold::is_code_path(path) {
        0.1
    } else if name.starts_with("test_") || path.starts_with("tests/") || path.contains("/tests/") {
        0.3
    } else {
        1.0
    }
}

/// Files by rarity-weighted hits, best first, with their hit lines.
fn ranked_files(hits: &[HashMap<String, Vec<usize>>]) -> Vec<(String, Vec<usize>)> {
    let mut score: BTreeMap<String, (f64, Vec<usize>)> = BTreeMap::new();
    for call in hits {
        let weight = 1.0 / call.len().max(1) as f64;
        for (file, lines) in call {
            let e = score.entry(file.clone()).or_default();
            e.0 += weight * file_weight(file);
            e.1.extend(lines);
        }
    }
    let mut v: Vec<(String, (f64, Vec<usize>))> = score.into_iter().collect();
    v.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0).then(a.0.cmp(&b.0)));
    v.into_iter()
        .map(|(f, (_, mut l))| {
            l.sort();
            l.dedup();
            (f, l)
        })
        .collect()
}

/// File -> numbered lines that read_file showed.
fn read_outputs(messages: &[Value]) -> HashMap<String, BTreeMap<usize, String>> {
    let mut out: HashMap<String, BTreeMap<usize, String>> = HashMap::new();
    for (c, text) in tool_exchanges(messages) {
        if c["name"] != "read_file" {
            continue;
        }
        let Some(path) = c["arguments"]["path"].as_str() else { continue };
        let lines = out.entry(path.to_string()).or_default();
        for l in text.lines() {
            if let Some(m) = READ_LINE.captures(l) {
                lines.insert(m[1].parse().unwrap_or(0), m[2].to_string());
            }
        }
    }
    out
}

/// `Class.method` or `func` whose `def` encloses `line`, from read lines.
fn enclosing_function(lines: &BTreeMap<usize, String>, line: usize) -> Option<String> {
    let indent = |s: &str| s.len() - s.trim_start().len();
    let hit_indent = lines.get(&line).map(|s| indent(s)).unwrap_or(usize::MAX);
    let mut def: Option<(usize, String)> = None;
    let mut class: Option<String> = None;
    for (_, text) in lines.range(..=line).rev() {
        if def.is_none() {
            if let Some(c) = DEF.captures(text) {
                if c[1].len() < hit_indent || text.trim_start().starts_with("def") && c[1].len() <= hit_indent {
                    def = Some((c[1].len(), c[2].to_string()));
                }
            }
        } else if let Some(c) = CLASS.captures(text) {
            if c[1].len() < def.as_ref().map_or(0, |d| d.0) {
                class = Some(c[2].to_string());
                break;
            }
        }
        if let Some((0, _)) = def {
            break;
        }
    }
    let (_, name) = def?;
    Some(match class {
        Some(c) => format!("{c}.{name}"),
        None => name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_prefer_code_names() {
        let k = keywords("requests.get is ALWAYS sending `Content-Length` via prepare_content_length in PreparedRequest");
        assert_eq!(k[0], "Content-Length", "{k:?}");
        assert!(k.contains(&"prepare_content_length".to_string()), "{k:?}");
        assert!(k.contains(&"PreparedRequest".to_string()), "{k:?}");
        assert!(!k.iter().any(|w| w == "ALWAYS" || w == "requests"), "{k:?}");
        // Plain words only after every code name.
        assert_eq!(k.last().map(String::as_str), Some("sending"), "{k:?}");
    }

    #[test]
    fn enclosing_function_walks_up_to_def_and_class() {
        let text: BTreeMap<usize, String> = [
            (10, "class PreparedRequest(object):"),
            (11, "    def prepare_body(self, data):"),
            (12, "        self.body = data"),
            (13, ""),
            (14, "    def prepare_content_length(self, body):"),
            (15, "        if body is None:"),
            (16, "            self.headers['Content-Length'] = '0'"),
            (20, "def top_level():"),
            (21, "    return 1"),
        ]
        .into_iter()
        .map(|(n, s)| (n, s.to_string()))
        .collect();
        assert_eq!(enclosing_function(&text, 16).as_deref(), Some("PreparedRequest.prepare_content_length"));
        assert_eq!(enclosing_function(&text, 12).as_deref(), Some("PreparedRequest.prepare_body"));
        assert_eq!(enclosing_function(&text, 21).as_deref(), Some("top_level"));
        assert_eq!(enclosing_function(&text, 10), None);
    }
}
