//! What a localization returns to a person or an agent: the files and
//! functions of the answers, ranked by the attempts that named them, each
//! with the evidence that led there (the tool call that surfaced it and the
//! line of its output), and the cost. Only entities of the searched
//! snapshot are ranked ([`crate::grounding`]); the others are listed apart,
//! "named by the model, not in the repository". Made from the episodes and
//! the snapshot they searched ([`crate::ranking`]).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Serialize;

use crate::entities::Entity;
use crate::episode::{Episode, StopReason};
use crate::grounding::NotInRepository;
use crate::ranking::{combine, rank, Ranking};
use crate::repo::Snapshot;

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
    /// Who searched: `model`, `scripted` (the scripted search), `search`
    /// (the index search, [`crate::search`]) or `combined` (the index
    /// search first, the model's attempts after).
    pub policy: String,
    /// Named by an attempt but not in the repository (no such file; no
    /// such function or class in that file): never ranked.
    pub not_in_repository: Vec<NotInRepository>,
    /// Share of the named entities that are in the repository (1 when
    /// nothing was named).
    pub grounded_rate: f64,
    pub cost: Cost,
}

impl Localization {
    /// Ranks the answers of `attempts` (the episodes of one issue, run
    /// by `policy` over `snapshot`) by votes, ties in the order first named.
    pub fn of(attempts: &[Episode], snapshot: &Snapshot, policy: &str) -> Localization {
        let all: Vec<&Episode> = attempts.iter().collect();
        Localization::from_ranking(rank(&all, snapshot), attempts, policy)
    }

    /// The scripted search (`scripted`, one episode or none) and the
    /// model's `attempts` together ([`combine`]); with `winner`, that model
    /// attempt's (0-based) answer first among the model's, as a tournament
    /// picked it.
    pub fn combined(scripted: &[Episode], attempts: &[Episode], snapshot: &Snapshot, winner: Option<usize>) -> Localization {
        let s: Vec<&Episode> = scripted.iter().collect();
        let m: Vec<&Episode> = attempts.iter().collect();
        let mut model = rank(&m, snapshot);
        if let Some(w) = winner.and_then(|w| attempts.get(w)) {
            winner_first(&mut model, w);
        }
        let all: Vec<Episode> = scripted.iter().chain(attempts).cloned().collect();
        let mut out = Localization::from_ranking(combine(&rank(&s, snapshot), &model), &all, "combined");
        if let Some(w) = winner.filter(|w| *w < attempts.len()) {
            out.selector = "tournament".into();
            out.winner = Some(scripted.len() + w + 1);
        }
        out
    }

    /// The index search's ranking (`search`, [`crate::search`]) and the
    /// model's `attempts` together ([`combine`]: the search's entities
    /// first, then what the model alone named); with `winner`, that model
    /// attempt's (0-based) answer first among the model's.
    pub fn combined_with(search: Ranking, attempts: &[Episode], snapshot: &Snapshot, winner: Option<usize>) -> Localization {
        let m: Vec<&Episode> = attempts.iter().collect();
        let mut model = rank(&m, snapshot);
        if let Some(w) = winner.and_then(|w| attempts.get(w)) {
            winner_first(&mut model, w);
        }
        let mut out = Localization::from_ranking(combine(&search, &model), attempts, "combined");
        if let Some(w) = winner.filter(|w| *w < attempts.len()) {
            out.selector = "tournament".into();
            out.winner = Some(w + 1);
        }
        out
    }

    /// The localization of a ranking made of `attempts`: evidence, cost.
    pub fn from_ranking(ranking: Ranking, attempts: &[Episode], policy: &str) -> Localization {
        let ranked = |list: &[String]| -> Vec<Ranked> {
            list.iter()
                .map(|n| Ranked { entity: n.clone(), votes: ranking.votes.get(n).copied().unwrap_or(1), evidence: evidence(attempts, n) })
                .collect()
        };
        let answered = attempts.iter().filter(|e| e.stop_reason() == Some(StopReason::Answer)).count();
        let found_by_tools = if answered == 0 { surfaced_files(attempts) } else { Vec::new() };
        Localization {
            files: ranked(&ranking.files),
            functions: ranked(&ranking.functions),
            answered,
            selector: "vote".into(),
            winner: None,
            found_by_tools,
            temperature: None,
            issue_cut: None,
            policy: policy.into(),
            grounded_rate: crate::grounding::rate(ranking.grounded, ranking.named),
            not_in_repository: ranking.not_in_repository,
            cost: cost(attempts),
        }
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
        use crate::repo::path::quote;
        let mut out = String::new();
        if let Some(cut) = &self.issue_cut {
            out += &format!(
                "note: the issue is {} tokens, over its budget of {} (--max-issue-tokens): {} tokens of its middle were dropped (its beginning and its end were searched)\n",
                cut.tokens, cut.max_issue_tokens, cut.dropped_tokens
            );
        }
        if self.policy == "combined" {
            out += &format!("ranked: the index search first, then the model's {} attempt(s)\n", self.cost.attempts);
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
                *out += &format!("{:>3}. {}{votes}\n", i + 1, quote(&r.entity));
                if let Some(ev) = &r.evidence {
                    *out += &format!("       <- turn {} {} {}: {}\n", ev.turn, ev.tool, ev.arguments, ev.line);
                }
            }
        };
        section(&mut out, "files", &self.files, self.cost.attempts);
        section(&mut out, "functions", &self.functions, self.cost.attempts);
        if !self.not_in_repository.is_empty() {
            out += "named by the model, not in the repository (left out of the ranking):\n";
            for n in &self.not_in_repository {
                out += &format!("  {} ({})\n", quote(&n.entity), n.why);
            }
        }
        if self.answered == 0 {
            out += "no attempt ended with an answer";
            if self.found_by_tools.is_empty() {
                out += "; the tools surfaced no file\n";
            } else {
                out += "; the files the tools surfaced:\n";
                for r in &self.found_by_tools {
                    out += &format!("  {} ({} call{})\n", quote(&r.entity), r.votes, if r.votes == 1 { "" } else { "s" });
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

/// Moves the entities `e` answered to the head of `r`'s lists (stable).
fn winner_first(r: &mut Ranking, e: &Episode) {
    let named = crate::ranking::answer_order(e);
    for list in [&mut r.files, &mut r.functions] {
        list.sort_by_key(|x| !named.contains(x));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::episode::CallRecord;
    use crate::grounding::tests::snapshot;
    use crate::ranking::tests::answered;

    #[test]
    fn made_up_path_and_function_are_listed_apart_with_no_evidence() {
        // The model read pkg/a.py, then answered a function that is not
        // there, an expression, a path that does not exist, and a real method.
        let mut e = answered("pkg/a.py:bridge\npkg/a.py:lines.splitlines()\nsessions.py\npkg/a.py:Session.send");
        let call = CallRecord {
            name: Some("read_file".into()),
            arguments: Some(serde_json::json!({"path": "pkg/a.py"})),
            output: "1: class Session:\n2:     def send(self):".into(),
            entities: [Entity::file("pkg/a.py"), Entity::function("pkg/a.py", "Session.send")].into_iter().collect(),
            error: false,
        };
        let mut turn = e.turns[0].clone();
        turn.text = "<tool_call>...</tool_call>".into();
        turn.calls = vec![call];
        e.turns.insert(0, turn);
        let loc = Localization::of(&[e], &snapshot(), "model");
        let names = |l: &[Ranked]| l.iter().map(|r| r.entity.clone()).collect::<Vec<_>>();
        assert_eq!(names(&loc.files), vec!["pkg/a.py"]);
        assert_eq!(names(&loc.functions), vec!["pkg/a.py:Session.send"]);
        let apart: Vec<&str> = loc.not_in_repository.iter().map(|n| n.entity.as_str()).collect();
        assert_eq!(apart, vec!["pkg/a.py:bridge", "pkg/a.py:lines.splitlines()", "sessions.py"]);
        assert!((loc.grounded_rate - 2.0 / 5.0).abs() < 1e-12);
        // Each ranked entity's evidence is a line of a real tool output.
        assert_eq!(loc.functions[0].evidence.as_ref().map(|e| e.line.as_str()), Some("2:     def send(self):"));
        let text = loc.render();
        assert!(text.contains("named by the model, not in the repository"), "{text}");
        assert!(text.contains("  sessions.py (no such file)"), "{text}");
        assert!(text.contains("  pkg/a.py:bridge (no such function or class in that file)"), "{text}");
        let listed = text.split("named by the model").next().unwrap_or("");
        assert!(!listed.contains("bridge") && !listed.contains("sessions.py"), "{text}");
        let json = serde_json::to_value(&loc).unwrap();
        assert_eq!(json["not_in_repository"][2], serde_json::json!({"entity": "sessions.py", "why": "no_file"}));
    }

    /// Issue 65 item 12: one call is "1 call", not "1 calls".
    #[test]
    fn the_files_the_tools_surfaced_count_their_calls_in_the_singular_too() {
        let ranked = |entity: &str, votes| Ranked { entity: entity.into(), votes, evidence: None };
        let loc = Localization { found_by_tools: vec![ranked("a.py", 2), ranked("b.py", 1)], ..Default::default() };
        let text = loc.render();
        assert!(text.contains("a.py (2 calls)") && text.contains("b.py (1 call)\n"), "{text}");
    }
}
