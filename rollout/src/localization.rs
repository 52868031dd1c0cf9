//! What a localization returns to a person or an agent: the files and
//! functions of the answers, ranked by the attempts that named them, each
//! with the evidence that led there (the tool call that surfaced it and the
//! line of its output), and the cost. Made from the episodes alone.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Serialize;

use crate::entities::Entity;
use crate::episode::{Episode, StopReason};

/// A ranked file or function.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct Ranked {
    /// `path` or `path:Qualified.name`.
    pub entity: String,
    /// Attempts whose answer named it.
    pub votes: usize,
    /// The first tool call (of the first attempt naming it) that surfaced it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Evidence>,
}

/// A tool call and the line of its output that points at an entity.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct Evidence {
    /// 1-based attempt.
    pub attempt: usize,
    /// 1-based turn.
    pub turn: usize,
    /// `grep`, `glob` or `read_file`.
    pub tool: String,
    /// The call's arguments.
    pub arguments: serde_json::Value,
    /// The first output line naming the entity (its file, or its name).
    pub line: String,
}

/// The cost of a localization: counts summed over its attempts, and the
/// wall time of the whole call (attempts run together, in one batch).
#[derive(Clone, Debug, Default, PartialEq, Serialize, JsonSchema)]
pub struct Cost {
    pub attempts: usize,
    pub turns: usize,
    pub tool_calls: usize,
    /// Tokens of the episodes (prompt, turns and tool outputs).
    pub tokens: usize,
    /// Tokens the model wrote.
    pub policy_tokens: usize,
    /// Wall seconds of the call: what the caller waited.
    pub seconds: f64,
    /// Each attempt's seconds, summed (attempts overlap: above `seconds`
    /// when there are several).
    pub attempt_seconds: f64,
}

/// An issue over its token budget, cut to fit: its beginning and its end
/// kept, the middle dropped (a marker line says where and how much).
#[derive(Clone, Debug, Default, PartialEq, Serialize, JsonSchema)]
pub struct IssueCut {
    /// The issue's tokens as given.
    pub tokens: usize,
    /// Tokens dropped from its middle.
    pub dropped_tokens: usize,
    /// The budget it was cut to (`--max-issue-tokens`).
    pub max_issue_tokens: usize,
}

/// The result of `fusegrpo localize` and of the MCP tool `localize`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, JsonSchema)]
pub struct Localization {
    pub files: Vec<Ranked>,
    pub functions: Vec<Ranked>,
    /// Attempts that ended with a parseable answer.
    pub answered: usize,
    /// How the ranking was made: `vote` (by the attempts naming each), or
    /// `tournament` (the winning attempt's answer first, then by votes).
    pub selector: String,
    /// With a tournament: the winning attempt (1-based).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub winner: Option<usize>,
    /// When no attempt answered: the files the tool calls surfaced, most
    /// often first (what the search found, not an answer).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub found_by_tools: Vec<Ranked>,
    /// The sampling temperature of the attempts (0: greedy); absent for a
    /// policy without one (the scripted search).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Set when the issue was over its token budget and was cut to fit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issue_cut: Option<IssueCut>,
    pub cost: Cost,
}

impl Localization {
    /// Ranks the answers of `attempts` (the episodes of one issue) by votes,
    /// ties in the order they were first named.
    pub fn of(attempts: &[Episode]) -> Localization {
        let mut order: Vec<String> = Vec::new();
        let mut votes: BTreeMap<String, usize> = BTreeMap::new();
        for e in attempts {
            let mut named: Vec<String> = Vec::new();
            for text in &e.answer {
                let Some(entity) = Entity::from_stored(text) else { continue };
                named.push(entity.to_string());
                if entity.is_function() {
                    named.push(entity.file_path().to_string());
                }
            }
            named.sort();
            named.dedup();
            for n in named {
                if !votes.contains_key(&n) {
                    order.push(n.clone());
                }
                *votes.entry(n).or_default() += 1;
            }
        }
        let mut ranked: Vec<Ranked> = order
            .iter()
            .map(|n| Ranked { entity: n.clone(), votes: votes[n], evidence: evidence(attempts, n) })
            .collect();
        ranked.sort_by(|a, b| b.votes.cmp(&a.votes));
        let (functions, files): (Vec<Ranked>, Vec<Ranked>) =
            ranked.into_iter().partition(|r| Entity::from_stored(&r.entity).is_some_and(|e| e.is_function()));
        let answered = attempts.iter().filter(|e| e.stop_reason() == Some(StopReason::Answer)).count();
        let found_by_tools = if answered == 0 { surfaced_files(attempts) } else { Vec::new() };
        Localization { files, functions, answered, selector: "vote".into(), winner: None, found_by_tools, temperature: None, issue_cut: None, cost: cost(attempts) }
    }

    /// With the call's wall seconds (measured around its attempts) as the cost's `seconds`.
    pub fn with_wall_seconds(mut self, seconds: f64) -> Localization {
        self.cost.seconds = seconds;
        self
    }

    /// The ranking with attempt `winner`'s (0-based) answer first, as a
    /// tournament picked it; the rest keep their order by votes.
    pub fn with_winner(mut self, attempts: &[Episode], winner: usize) -> Localization {
        let Some(e) = attempts.get(winner) else { return self };
        let mut named: Vec<String> = Vec::new();
        for text in &e.answer {
            if let Some(entity) = Entity::from_stored(text) {
                named.push(entity.file_path().to_string());
                named.push(entity.to_string());
            }
        }
        for list in [&mut self.files, &mut self.functions] {
            list.sort_by_key(|r| !named.contains(&r.entity));
        }
        self.selector = "tournament".into();
        self.winner = Some(winner + 1);
        self
    }

    /// The plain-text report: ranked files, functions, evidence, cost.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Some(cut) = &self.issue_cut {
            out += &format!(
                "note: the issue is {} tokens, over its budget of {} (--max-issue-tokens): {} tokens of its middle were dropped (its beginning and its end were searched)\n",
                cut.tokens, cut.max_issue_tokens, cut.dropped_tokens
            );
        }
        if let Some(w) = self.winner {
            out += &format!("tournament winner: attempt {w} of {}\n", self.cost.attempts);
        }
        let section = |out: &mut String, title: &str, items: &[Ranked], attempts: usize| {
            if items.is_empty() {
                return;
            }
            *out += &format!("{title}:\n");
            for (i, r) in items.iter().enumerate() {
                let votes = if attempts > 1 { format!("  ({} of {attempts} attempts)", r.votes) } else { String::new() };
                *out += &format!("{:>3}. {}{votes}\n", i + 1, r.entity);
                if let Some(ev) = &r.evidence {
                    *out += &format!("       <- turn {} {} {}: {}\n", ev.turn, ev.tool, ev.arguments, ev.line);
                }
            }
        };
        section(&mut out, "files", &self.files, self.cost.attempts);
        section(&mut out, "functions", &self.functions, self.cost.attempts);
        if self.answered == 0 {
            out += "no attempt ended with an answer";
            if self.found_by_tools.is_empty() {
                out += "; the tools surfaced no file\n";
            } else {
                out += "; the files the tools surfaced:\n";
                for r in &self.found_by_tools {
                    out += &format!("  {} ({} calls)\n", r.entity, r.votes);
                }
            }
        }
        let c = &self.cost;
        let temperature = match self.temperature {
            Some(t) if t > 0.0 => format!(" at temperature {t}"),
            Some(_) => " (greedy)".into(),
            None => String::new(),
        };
        let summed = if c.attempts > 1 { format!(" (attempts summed: {:.1} s)", c.attempt_seconds) } else { String::new() };
        out += &format!(
            "cost: {} attempt(s){temperature}, {} turns, {} tool calls, {} tokens ({} written), {:.1} s wall{summed}\n",
            c.attempts, c.turns, c.tool_calls, c.tokens, c.policy_tokens, c.seconds
        );
        out
    }
}

/// The first call that surfaced `entity` (or, for a function, its file).
fn evidence(attempts: &[Episode], entity: &str) -> Option<Evidence> {
    let parsed = Entity::from_stored(entity)?;
    let file = parsed.file_path().to_string();
    let name = match &parsed {
        Entity::Function { name, .. } => Some(name.rsplit('.').next().unwrap_or(name).to_string()),
        Entity::File(_) => None,
    };
    for (a, e) in attempts.iter().enumerate() {
        if !e.answer.iter().any(|t| Entity::from_stored(t).is_some_and(|x| x == parsed || x.file_path() == file)) {
            continue;
        }
        for (t, turn) in e.turns.iter().enumerate() {
            for call in &turn.calls {
                if call.error || !call.entities.iter().any(|x| *x == parsed || x.file_path() == file) {
                    continue;
                }
                let needle = name.as_deref().unwrap_or(&file);
                let line = call
                    .output
                    .lines()
                    .find(|l| l.contains(needle))
                    .or_else(|| call.output.lines().find(|l| l.contains(&file)))
                    .or_else(|| call.output.lines().next())
                    .unwrap_or("")
                    .trim_end()
                    .to_string();
                return Some(Evidence {
                    attempt: a + 1,
                    turn: t + 1,
                    tool: call.name.clone().unwrap_or_default(),
                    arguments: call.arguments.clone().unwrap_or(serde_json::Value::Null),
                    line,
                });
            }
        }
    }
    None
}

/// Files the tool calls surfaced, by the number of calls that did.
fn surfaced_files(attempts: &[Episode]) -> Vec<Ranked> {
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    let mut order = Vec::new();
    for call in attempts.iter().flat_map(|e| e.turns.iter().flat_map(|t| t.calls.iter())).filter(|c| !c.error) {
        let mut files: Vec<&str> = call.entities.iter().map(Entity::file_path).collect();
        files.sort();
        files.dedup();
        for f in files {
            if !count.contains_key(f) {
                order.push(f.to_string());
            }
            *count.entry(f.to_string()).or_default() += 1;
        }
    }
    let mut out: Vec<Ranked> = order.into_iter().map(|f| Ranked { votes: count[&f], entity: f, evidence: None }).collect();
    out.sort_by(|a, b| b.votes.cmp(&a.votes));
    out.truncate(10);
    out
}

fn cost(attempts: &[Episode]) -> Cost {
    Cost {
        attempts: attempts.len(),
        turns: attempts.iter().map(|e| e.turns.len()).sum(),
        tool_calls: attempts.iter().map(Episode::tool_calls).sum(),
        tokens: attempts.iter().map(|e| e.tokens.len()).sum(),
        policy_tokens: attempts.iter().map(Episode::policy_tokens).sum(),
        // Until the caller gives the wall time: the longest attempt (they overlap).
        seconds: attempts.iter().map(|e| e.seconds).fold(0.0, f64::max),
        attempt_seconds: attempts.iter().map(|e| e.seconds).sum(),
    }
}
