//! What a localization returns to a person or an agent: the files and
//! functions of the answers, ranked by the attempts that named them, each
//! with the evidence that led there (the tool call that surfaced it and the
//! line of its output), and the cost. Only entities of the searched
//! snapshot are ranked ([`crate::grounding`]); the others are listed apart,
//! with who named them. Each ranked entity says who found it: the search
//! (the index search, or the scripted one), and how many of the model's
//! attempts named it. Made from the episodes and the snapshot they
//! searched ([`crate::ranking`]).

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::Serialize;

use crate::entities::Entity;
use crate::episode::{Episode, StopReason};
use crate::grounding::{self, NotInRepository};
use crate::ranking::{combine, rank, Ranking};
use crate::repo::Snapshot;

/// A ranked file or function.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct Ranked {
    /// `path` or `path:Qualified.name` (a function nested in another is
    /// named through it: `outer.inner`).
    pub entity: String,
    /// The model's attempts whose answer named it (out of `cost.attempts`).
    pub votes: usize,
    /// Whether the search ranked it (the index search under `search` and
    /// `combined`, the scripted search under `scripted`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub search: bool,
    /// A function defined inside another function, named through it
    /// (`outer.inner`); its lines are its enclosing function's in gold.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nested: bool,
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
    /// The first output line pointing at the entity: for a file, a line of
    /// it (else one naming it); for a function, a line inside the
    /// function's own lines (a grep match or a line read), its name's first.
    pub line: String,
}

/// The cost of a localization: counts summed over its episodes (the
/// scripted search's and the model's attempts), and the wall time of the
/// whole call (attempts run together, in one batch).
#[derive(Clone, Debug, Default, PartialEq, Serialize, JsonSchema)]
pub struct Cost {
    /// The model's attempts (0 under `search` and `scripted`; the search
    /// runs once besides, whatever the number).
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
    /// When no file is ranked (no attempt answered, or every answer was
    /// empty or named nothing in the repository): the files the tool calls
    /// surfaced, most often first (what the tools found, not an answer).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub found_by_tools: Vec<Ranked>,
    /// The sampling temperature of the attempts (0: greedy); absent for a
    /// policy without one (the scripted search).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Set when the issue was over its token budget and was cut to fit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issue_cut: Option<IssueCut>,
    /// Under `combined`, why the index search could not run (e.g. the issue
    /// has nothing to search for): the model's attempts then stand alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search_error: Option<String>,
    /// Who searched: `model`, `scripted` (the scripted search), `search`
    /// (the index search, [`crate::search`]) or `combined` (the index
    /// search first, the model's attempts after).
    pub policy: String,
    /// Named by an attempt but not in the repository (no such file; no
    /// such function or class in that file): never ranked. The model named
    /// them (the scripted search under `scripted`; the index search names
    /// only what its index of the snapshot holds).
    pub not_in_repository: Vec<NotInRepository>,
    /// Share of the named entities that are in the repository (1 when
    /// nothing was named).
    pub grounded_rate: f64,
    pub cost: Cost,
}

impl Localization {
    /// Ranks the answers of `attempts` (the episodes of one issue, run
    /// by `policy` over `snapshot`) by votes, ties in the order first named.
    /// Under `scripted` the one episode is the scripted search's, not a
    /// model attempt.
    pub fn of(attempts: &[Episode], snapshot: &Snapshot, policy: &str) -> Localization {
        let all: Vec<&Episode> = attempts.iter().collect();
        let ranking = rank(&all, snapshot);
        if policy == "scripted" {
            return Localization::assemble(ranking, Source::Search, attempts, 0, snapshot, policy);
        }
        Localization::assemble(ranking, Source::Model, attempts, attempts.len(), snapshot, policy)
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
        let searched = Source::Both { search: search.files.iter().chain(&search.functions).cloned().collect(), model: model.votes.clone() };
        let mut out = Localization::assemble(combine(&search, &model), searched, attempts, attempts.len(), snapshot, "combined");
        if let Some(w) = winner.filter(|w| *w < attempts.len()) {
            out.selector = "tournament".into();
            out.winner = Some(w + 1);
        }
        out
    }

    /// The index search's ranking alone (`search`: no episode, no model).
    pub fn searched(ranking: Ranking, snapshot: &Snapshot) -> Localization {
        let mut out = Localization::assemble(ranking, Source::Search, &[], 0, snapshot, "search");
        // The search answered when it ranked a file.
        out.answered = usize::from(!out.files.is_empty());
        out
    }

    /// The localization of a ranking made of `attempts` (`model_attempts`
    /// of them the model's), its entities found by `source`: evidence,
    /// cost.
    fn assemble(ranking: Ranking, source: Source, attempts: &[Episode], model_attempts: usize, snapshot: &Snapshot, policy: &str) -> Localization {
        let ranked = |list: &[String]| -> Vec<Ranked> {
            let mut seen = BTreeSet::new();
            // Each entity once (the index search may rank two definitions of one name).
            list.iter()
                .filter(|n| seen.insert(n.as_str()))
                .map(|n| {
                    let (search, votes) = match &source {
                        Source::Model => (false, ranking.votes.get(n).copied().unwrap_or(0)),
                        Source::Search => (true, 0),
                        Source::Both { search, model } => (search.contains(n), model.get(n).copied().unwrap_or(0)),
                    };
                    Ranked { entity: n.clone(), votes, search, nested: is_nested(snapshot, n), evidence: evidence(attempts, n, snapshot) }
                })
                .collect()
        };
        let answered = attempts.iter().filter(|e| e.stop_reason() == Some(StopReason::Answer)).count();
        // An empty or wholly ungrounded answer hides nothing the tools found.
        let found_by_tools = if ranking.files.is_empty() { surfaced_files(attempts) } else { Vec::new() };
        let mut cost = cost(attempts);
        cost.attempts = model_attempts;
        Localization {
            files: ranked(&ranking.files),
            functions: ranked(&ranking.functions),
            answered,
            selector: "vote".into(),
            winner: None,
            found_by_tools,
            temperature: None,
            issue_cut: None,
            search_error: None,
            policy: policy.into(),
            grounded_rate: crate::grounding::rate(ranking.grounded, ranking.named),
            not_in_repository: ranking.not_in_repository,
            cost,
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

    /// The plain-text report: ranked files, functions (each with who
    /// found it: the search, and how many of the model's attempts named
    /// it), evidence, cost.
    pub fn render(&self) -> String {
        use crate::repo::path::quote;
        let mut out = String::new();
        if let Some(cut) = &self.issue_cut {
            out += &format!(
                "note: the issue is {} tokens, over its budget of {} (--max-issue-tokens): {} tokens of its middle were dropped (its beginning and its end were searched)\n",
                cut.tokens, cut.max_issue_tokens, cut.dropped_tokens
            );
        }
        let attempts = self.cost.attempts;
        let combined = self.policy == "combined";
        if let Some(why) = &self.search_error {
            out += &format!("note: the index search did not run ({why}); ranked: the model's {attempts} attempt(s) alone\n");
        } else if combined {
            out += &format!("ranked: the index search first, then the model's {attempts} attempt(s)\n");
        }
        if let Some(w) = self.winner {
            out += &format!("tournament winner: model attempt {w} of {attempts}\n");
        }
        // Who found each entity, where more than one could have.
        let found_by = |r: &Ranked| -> String {
            let mut who: Vec<String> = Vec::new();
            if combined && r.search {
                who.push("the index search".into());
            }
            if r.votes > 0 && (combined || attempts > 1) {
                who.push(if attempts > 1 { format!("{} of {attempts} model attempts", r.votes) } else { "the model".into() });
            }
            if who.is_empty() { String::new() } else { format!("  ({})", who.join("; ")) }
        };
        let section = |out: &mut String, title: &str, items: &[Ranked]| {
            if items.is_empty() {
                return;
            }
            *out += &format!("{title}:\n");
            for (i, r) in items.iter().enumerate() {
                *out += &format!("{:>3}. {}{}\n", i + 1, quote(&r.entity), found_by(r));
                if let Some(ev) = &r.evidence {
                    *out += &format!("       <- turn {} {} {}: {}\n", ev.turn, ev.tool, ev.arguments, ev.line);
                }
            }
        };
        section(&mut out, "files", &self.files);
        section(&mut out, "functions", &self.functions);
        if self.functions.iter().any(|r| r.nested) {
            out += "(a function defined inside another is named through it: outer.inner)\n";
        }
        if !self.not_in_repository.is_empty() {
            out += &format!("named by {}, not in the repository (left out of the ranking):\n", self.namer());
            for n in &self.not_in_repository {
                out += &format!("  {} ({})\n", quote(&n.entity), n.why);
            }
        }
        if self.files.is_empty() {
            let answered = self.answered > 0;
            out += &match self.policy.as_str() {
                "search" => "the index search ranked no file".to_string(),
                "scripted" if answered => "the scripted search named no file of the repository".into(),
                "scripted" => "the scripted search ended without an answer".into(),
                "combined" if answered => "the index search ranked no file, and no model answer named a file of the repository".into(),
                "combined" => "the index search ranked no file, and no model attempt ended with an answer".into(),
                _ if answered => "no answer named a file of the repository".into(),
                _ => "no attempt ended with an answer".into(),
            };
            if self.policy == "search" {
                out += "\n";
            } else if self.found_by_tools.is_empty() {
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
        let who = match self.policy.as_str() {
            "combined" => format!("the index search + {attempts} model attempt(s)"),
            "search" => "the index search".into(),
            "scripted" => "the scripted search".into(),
            _ => format!("{attempts} model attempt(s)"),
        };
        let summed = if c.attempts > 1 { format!(" (attempts summed: {:.1} s)", c.attempt_seconds) } else { String::new() };
        out += &format!(
            "cost: {who}{temperature}, {} turns, {} tool calls, {} tokens ({} written), {:.1} s wall{summed}\n",
            c.turns, c.tool_calls, c.tokens, c.policy_tokens, c.seconds
        );
        out
    }

    /// Who named the entities of [`Localization::not_in_repository`].
    fn namer(&self) -> &'static str {
        match self.policy.as_str() {
            "scripted" => "the scripted search",
            "search" => "the index search",
            _ => "the model",
        }
    }
}

/// Whether `entity`, a grounded function of `snapshot`, is one defined
/// inside another function (named through it, `outer.inner`): no span of
/// its file has its name.
fn is_nested(snapshot: &Snapshot, entity: &str) -> bool {
    let Some(Entity::Function { file, name }) = Entity::from_stored(entity) else { return false };
    snapshot.file(&file).and_then(|f| f.spans()).is_some_and(|s| !s.names().any(|n| n == name))
}

/// Who found a localization's entities.
enum Source {
    /// The model's attempts (votes from the ranking).
    Model,
    /// A search alone (the index search, or the scripted one).
    Search,
    /// The index search's entities and the model's votes.
    Both { search: BTreeSet<String>, model: BTreeMap<String, usize> },
}

/// Moves the entities `e` answered to the head of `r`'s lists (stable).
fn winner_first(r: &mut Ranking, e: &Episode) {
    let named = crate::ranking::answer_order(e);
    for list in [&mut r.files, &mut r.functions] {
        list.sort_by_key(|x| !named.contains(x));
    }
}

/// The first call that surfaced `entity` (of the first attempt naming it
/// or its file), and the line of its output: for a file, the first line
/// of it (else the first naming it); for a function, the first line inside the function's own
/// lines in `snapshot` (a grep match in its file, or a line read from it),
/// preferring one with its name. A function with no such line has none.
fn evidence(attempts: &[Episode], entity: &str, snapshot: &Snapshot) -> Option<Evidence> {
    let parsed = Entity::from_stored(entity)?;
    let file = parsed.file_path().to_string();
    let lines = match &parsed {
        Entity::Function { .. } => Some(grounding::resolve(snapshot, &parsed).ok()?.1?),
        Entity::File(_) => None,
    };
    for (a, e) in attempts.iter().enumerate() {
        if !e.answer.iter().any(|t| Entity::from_stored(t).is_some_and(|x| x.file_path() == file)) {
            continue;
        }
        for (t, turn) in e.turns.iter().enumerate() {
            for call in turn.calls.iter().filter(|c| !c.error && c.entities.iter().any(|x| x.file_path() == file)) {
                let line = match (&parsed, lines) {
                    (Entity::Function { name, .. }, Some(span)) => {
                        let bare = name.rsplit('.').next().unwrap_or(name);
                        let inside: Vec<&str> = call.output.lines().filter(|l| line_in(call, l, &file).is_some_and(|n| span.0 <= n && n <= span.1)).collect();
                        inside.iter().find(|l| l.contains(bare)).or(inside.first()).copied()
                    }
                    // A line of the file itself first (a grep match in it, a line read), then one naming it.
                    _ => call
                        .output
                        .lines()
                        .find(|l| line_in(call, l, &file).is_some())
                        .or_else(|| call.output.lines().find(|l| l.contains(&file)))
                        .or_else(|| call.output.lines().next()),
                };
                let Some(line) = line else { continue };
                return Some(Evidence {
                    attempt: a + 1,
                    turn: t + 1,
                    tool: call.name.clone().unwrap_or_default(),
                    arguments: call.arguments.clone().unwrap_or(serde_json::Value::Null),
                    line: line.trim_end().to_string(),
                });
            }
        }
    }
    None
}

/// The line number of `file` that an output line of `call` shows: a grep
/// match `path:N:text`, or a line `N<tab>text` (`N: text`) that read_file
/// read from `file`.
fn line_in(call: &crate::episode::CallRecord, line: &str, file: &str) -> Option<usize> {
    match call.name.as_deref() {
        Some("grep") => {
            let rest = line.strip_prefix(crate::repo::path::quote(file).as_ref())?.strip_prefix(':')?;
            rest.split(':').next()?.parse().ok()
        }
        Some("read_file") => {
            let path = call.arguments.as_ref()?.get("path")?.as_str()?;
            if path.trim_start_matches("./") != file {
                return None;
            }
            let digits: String = line.trim_start().chars().take_while(char::is_ascii_digit).collect();
            let rest = &line.trim_start()[digits.len()..];
            (rest.starts_with('\t') || rest.starts_with(':')).then(|| digits.parse().ok()).flatten()
        }
        _ => None,
    }
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
    let mut out: Vec<Ranked> = order.into_iter().map(|f| Ranked { votes: count[&f], entity: f, search: false, nested: false, evidence: None }).collect();
    out.sort_by_key(|r| std::cmp::Reverse(r.votes));
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

    /// `e` with a first turn of one tool call `name(arguments)` that output `output`.
    fn with_call(mut e: Episode, name: &str, arguments: serde_json::Value, output: &str, entities: &[Entity]) -> Episode {
        let call = CallRecord {
            name: Some(name.into()),
            arguments: Some(arguments),
            output: output.into(),
            entities: entities.iter().cloned().collect(),
            error: false,
        };
        let mut turn = e.turns[0].clone();
        turn.text = "<tool_call>...</tool_call>".into();
        turn.calls = vec![call];
        e.turns.insert(0, turn);
        e
    }

    /// Issue 65 item 1: votes are the model's attempts, the search said
    /// apart (a search's file named by 2 of 4 attempts read "3 of 4").
    #[test]
    fn votes_count_the_model_attempts_and_the_search_is_said_apart() {
        let search = Ranking {
            files: vec!["pkg/a.py".into()],
            votes: [("pkg/a.py".to_string(), 1)].into_iter().collect(),
            answer: crate::answer::Answer::from_strings(["pkg/a.py"]),
            named: 1,
            grounded: 1,
            ..Ranking::default()
        };
        let attempts = [answered("pkg/a.py"), answered("pkg/a.py"), answered("README.md"), answered("nothing here")];
        let loc = Localization::combined_with(search, &attempts, &snapshot(), None);
        let text = loc.render();
        assert!(text.contains("  1. pkg/a.py  (the index search; 2 of 4 model attempts)\n"), "{text}");
        assert!(text.contains("  2. README.md  (1 of 4 model attempts)\n"), "{text}");
        assert!(text.contains("cost: the index search + 4 model attempt(s)"), "{text}");
        let json = serde_json::to_value(&loc).unwrap();
        assert_eq!((json["files"][0]["votes"].as_u64(), json["files"][0]["search"].as_bool()), (Some(2), Some(true)), "{json}");
        assert_eq!(json["cost"]["attempts"], 4);
    }

    /// Issue 65 item 2: an empty answer, or one naming only what is not in
    /// the repository, no longer hides the files the tools surfaced (and
    /// says that nothing was named).
    #[test]
    fn an_empty_or_ungrounded_answer_does_not_hide_what_the_tools_surfaced() {
        for answer in ["", "sessions.py"] {
            let e = with_call(answered(answer), "grep", serde_json::json!({"pattern": "send"}), "pkg/a.py:2:    def send(self):", &[Entity::file("pkg/a.py")]);
            let loc = Localization::of(&[e], &snapshot(), "model");
            assert!(loc.files.is_empty());
            assert_eq!(loc.found_by_tools.iter().map(|r| r.entity.as_str()).collect::<Vec<_>>(), vec!["pkg/a.py"], "{answer:?}");
            let text = loc.render();
            assert!(text.contains("no answer named a file of the repository; the files the tools surfaced:\n  pkg/a.py (1 call)\n"), "{answer:?}: {text}");
        }
    }

    /// Issue 65 item 5: under `scripted` no model ran: what is not in the
    /// repository is the scripted search's.
    #[test]
    fn not_in_the_repository_says_who_named_it() {
        let scripted = Localization::of(&[answered("pkg/a.py\npkg/a.py:bridge")], &snapshot(), "scripted");
        let text = scripted.render();
        assert!(text.contains("named by the scripted search, not in the repository"), "{text}");
        assert!(!text.contains("model"), "{text}");
        let model = Localization::of(&[answered("pkg/a.py\npkg/a.py:bridge")], &snapshot(), "model");
        assert!(model.render().contains("named by the model, not in the repository"));
    }

    /// Issue 65 item 4: a function's evidence is a line inside it (it was
    /// the first line naming it: a docstring above it), or none.
    #[test]
    fn evidence_for_a_function_lies_inside_its_lines() {
        let py = "\"\"\"Call helper() to dump.\"\"\"\n\n\ndef helper():\n    return 1\n\n\ndef other():\n    return helper()\n";
        let snap = Snapshot::new("o/r".into(), "c".into(), vec![crate::repo::FileEntry::new("pkg/b.py".into(), crate::repo::FileKind::Text(py.as_bytes().to_vec()))]);
        let grep = "pkg/b.py:1:\"\"\"Call helper() to dump.\"\"\"\npkg/b.py:4:def helper():\npkg/b.py:9:    return helper()";
        let e = with_call(answered("pkg/b.py:helper\npkg/b.py:other"), "grep", serde_json::json!({"pattern": "helper"}), grep, &[Entity::file("pkg/b.py")]);
        let loc = Localization::of(&[e], &snap, "model");
        let line = |name: &str| loc.functions.iter().find(|r| r.entity == name).and_then(|r| r.evidence.as_ref()).map(|e| e.line.clone());
        assert_eq!(line("pkg/b.py:helper").as_deref(), Some("pkg/b.py:4:def helper():"));
        assert_eq!(line("pkg/b.py:other").as_deref(), Some("pkg/b.py:9:    return helper()"));
        // Lines read from another function only: no evidence for it.
        let read = "1\t\"\"\"Call helper() to dump.\"\"\"\n8\tdef other():\n9\t    return helper()";
        let e = with_call(answered("pkg/b.py:helper"), "read_file", serde_json::json!({"path": "pkg/b.py", "start_line": 8}), read, &[Entity::file("pkg/b.py")]);
        let loc = Localization::of(&[e], &snap, "model");
        assert_eq!(loc.functions[0].entity, "pkg/b.py:helper");
        assert_eq!(loc.functions[0].evidence, None);
        assert!(loc.files[0].evidence.is_some(), "a file's evidence is any line of it");
        // A file's evidence: a line of the file before a line naming it elsewhere.
        let grep = "README.md:3:see pkg/b.py for helper\npkg/b.py:4:def helper():";
        let e = with_call(answered("pkg/b.py"), "grep", serde_json::json!({"pattern": "helper"}), grep, &[Entity::file("pkg/b.py"), Entity::file("README.md")]);
        let loc = Localization::of(&[e], &snap, "model");
        assert_eq!(loc.files[0].evidence.as_ref().map(|e| e.line.as_str()), Some("pkg/b.py:4:def helper():"));
    }

    /// A ranking naming an entity twice lists it once.
    #[test]
    fn each_entity_is_listed_once() {
        let search = Ranking { files: vec!["pkg/a.py".into(), "pkg/a.py".into()], functions: vec!["pkg/a.py:helper".into(), "pkg/a.py:helper".into()], ..Ranking::default() };
        let loc = Localization::searched(search, &snapshot());
        assert_eq!((loc.files.len(), loc.functions.len()), (1, 1));
    }

    /// Issue 65 item 12: one call is "1 call", not "1 calls".
    #[test]
    fn the_files_the_tools_surfaced_count_their_calls_in_the_singular_too() {
        let ranked = |entity: &str, votes| Ranked { entity: entity.into(), votes, search: false, nested: false, evidence: None };
        let loc = Localization { found_by_tools: vec![ranked("a.py", 2), ranked("b.py", 1)], ..Default::default() };
        let text = loc.render();
        assert!(text.contains("a.py (2 calls)") && text.contains("b.py (1 call)\n"), "{text}");
    }
}
