//! An attempt's structured summary, made from the episode itself: the calls
//! with their patterns and paths, the entities the tools surfaced and by how
//! many distinct calls, which answered entities the tools showed, and the
//! answer. Judges read it ([`AttemptSummary::render`]), refine puts the
//! winner's in its prompt, and the evidence judge counts from it.

use crate::answer::Answer;
use crate::episode::{Episode, StopReason};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Surfaced entities listed in a rendered summary at most (most-surfaced first).
const RENDER_SURFACED: usize = 6;
/// Characters of one call's arguments in a rendered summary at most.
const RENDER_ARG_CHARS: usize = 60;

/// One tool call as the summary tells it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallBrief {
    /// The tool's name (`?` when the block did not parse).
    pub tool: String,
    /// Its arguments, compact (`pattern="x" path="y"`).
    pub args: String,
    /// Entities its output surfaced.
    pub surfaced: usize,
    /// The call failed (bad arguments, missing file, ...).
    pub error: bool,
}

/// What one attempt did and answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptSummary {
    /// The attempt's index among its task's attempts.
    pub attempt: usize,
    pub turns: usize,
    pub calls: Vec<CallBrief>,
    /// Entity -> number of distinct calls (same tool and arguments count once)
    /// whose output surfaced it.
    pub surfaced: BTreeMap<String, usize>,
    /// The answered entities (files and functions, a function's file included).
    pub answer: Vec<String>,
    /// Answered entity -> distinct calls that surfaced it (0: the tools never showed it).
    pub support: BTreeMap<String, usize>,
    /// Distinct calls that surfaced at least one answered entity.
    pub evidence_calls: usize,
    /// The attempt ended with an answer.
    pub answered: bool,
    /// A summary the judge wrote in place of the calls and surfaced
    /// entities (`SummarySource::Judge`); the answer is still listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written: Option<String>,
    /// Tokens the judge read and wrote for `written`.
    #[serde(default)]
    pub written_tokens: usize,
}

impl AttemptSummary {
    /// The summary of `episode`, the `attempt`-th of its task.
    pub fn of(episode: &Episode, attempt: usize) -> AttemptSummary {
        let mut calls = Vec::new();
        let mut seen_calls = BTreeSet::new();
        let mut surfaced: BTreeMap<String, usize> = BTreeMap::new();
        let mut distinct_sets = Vec::new();
        for call in episode.turns.iter().flat_map(|t| &t.calls) {
            let tool = call.name.clone().unwrap_or_else(|| "?".into());
            let args = call.arguments.as_ref().map(compact_args).unwrap_or_default();
            calls.push(CallBrief { tool: tool.clone(), args: args.clone(), surfaced: call.entities.len(), error: call.error });
            if !seen_calls.insert((tool, args)) {
                continue;
            }
            let names: BTreeSet<String> = call.entities.iter().map(ToString::to_string).collect();
            for name in &names {
                *surfaced.entry(name.clone()).or_default() += 1;
            }
            distinct_sets.push(names);
        }
        let answer = Answer::from_strings(episode.answer.iter().map(String::as_str));
        let answer: Vec<String> = answer.functions.iter().chain(answer.files.iter()).cloned().collect();
        let support = answer.iter().map(|a| (a.clone(), surfaced.get(a).copied().unwrap_or(0))).collect();
        let evidence_calls = distinct_sets.iter().filter(|set| answer.iter().any(|a| set.contains(a))).count();
        AttemptSummary {
            attempt,
            turns: episode.turns.len(),
            calls,
            surfaced,
            answer,
            support,
            evidence_calls,
            answered: episode.stop_reason() == Some(StopReason::Answer),
            written: None,
            written_tokens: 0,
        }
    }

    /// Mean over answered entities of the distinct calls that surfaced it (0
    /// without an answer).
    pub fn mean_support(&self) -> f64 {
        if self.support.is_empty() {
            return 0.0;
        }
        self.support.values().sum::<usize>() as f64 / self.support.len() as f64
    }

    /// The summary as text for a judge's or a refine attempt's prompt,
    /// compact (it is prefilled once per comparison or refine attempt).
    pub fn render(&self) -> String {
        let ended = if self.answered { "answered" } else { "no answer" };
        let mut out = format!("{} turns, {} tool calls, {ended}.\n", self.turns, self.calls.len());
        if let Some(w) = &self.written {
            out.push_str(w.trim());
            out.push('\n');
        } else {
            self.render_search(&mut out);
        }
        self.render_answer(&mut out);
        out
    }

    /// The calls and the other surfaced entities.
    fn render_search(&self, out: &mut String) {
        if !self.calls.is_empty() {
            let calls: Vec<String> = self
                .calls
                .iter()
                .map(|c| format!("{} {}{}", c.tool, c.args, if c.error { " (error)" } else { "" }))
                .collect();
            out.push_str(&format!("Calls: {}\n", calls.join("; ")));
        }
        let mut top: Vec<(&String, &usize)> = self.surfaced.iter().filter(|(e, _)| !self.support.contains_key(*e)).collect();
        top.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
        if !top.is_empty() {
            let listed: Vec<String> = top.iter().take(RENDER_SURFACED).map(|(e, n)| format!("{e} ({n})")).collect();
            let more = top.len().saturating_sub(RENDER_SURFACED);
            let tail = if more > 0 { format!(", {more} more") } else { String::new() };
            out.push_str(&format!("Also surfaced (by distinct calls): {}{tail}\n", listed.join(", ")));
        }
    }

    /// The answer with each entity's support.
    fn render_answer(&self, out: &mut String) {
        if self.answer.is_empty() {
            out.push_str("Answer: none\n");
        } else {
            out.push_str("Answer:\n");
            for a in &self.answer {
                let n = self.support.get(a).copied().unwrap_or(0);
                out.push_str(&format!("- {a} (shown by {n} call{})\n", if n == 1 { "" } else { "s" }));
            }
        }
    }
}

/// Characters of one tool output in a transcript at most.
const TRANSCRIPT_OUTPUT_CHARS: usize = 400;

/// An episode as text for a judge asked to summarize it: each turn's text
/// (tool calls included) and its tool outputs, each cut to
/// [`TRANSCRIPT_OUTPUT_CHARS`].
pub fn transcript(episode: &Episode) -> String {
    let mut out = String::new();
    for (i, t) in episode.turns.iter().enumerate() {
        out.push_str(&format!("Turn {}:\n{}\n", i + 1, t.text.trim()));
        for c in &t.calls {
            out.push_str(&format!("Tool output:\n{}\n", cut_to(&c.output, TRANSCRIPT_OUTPUT_CHARS)));
        }
    }
    out
}

/// `key="value"` pairs of a call's arguments, in key order, each value cut
/// to [`RENDER_ARG_CHARS`].
fn compact_args(args: &Value) -> String {
    let Some(obj) = args.as_object() else {
        return cut(&args.to_string());
    };
    let mut keys: Vec<&String> = obj.keys().collect();
    keys.sort();
    keys.iter()
        .map(|k| match &obj[k.as_str()] {
            Value::String(s) => format!("{k}={:?}", cut(s)),
            other => format!("{k}={}", cut(&other.to_string())),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn cut(s: &str) -> String {
    cut_to(s, RENDER_ARG_CHARS)
}

fn cut_to(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut t: String = s.chars().take(max).collect();
    t.push_str("...");
    t
}
