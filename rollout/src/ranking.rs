//! Ranked, grounded answers and what they are worth (issue 56).
//!
//! An attempt's answer is a ranking: its entities in the order written.
//! Several attempts rank by votes (the attempts naming each), ties in the
//! order first named. Only [grounded](crate::grounding) entities are
//! ranked; the others are listed apart. [`combine`] puts the scripted
//! search and the model together so that the result is never worse than
//! the search alone where it matters to an agent (the head of the ranking
//! and the answer set). [`RankScore`] gives set F1 and the rank of the first
//! gold entity (accuracy@k: a gold file or function in the top k).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::answer::{answer_entities, f1, Answer};
use crate::entities::Entity;
use crate::episode::Episode;
use crate::grounding::{self, NotInRepository};
use crate::repo::Snapshot;
use crate::search::{EntityHit, Hits, IndexCache, SearchConfig, SearchError};
use crate::reward::Gold;

/// The k of accuracy@k that tables report.
pub const KS: [usize; 3] = [1, 3, 5];

/// A grounded ranking of files and functions, and the answer set scored by F1.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ranking {
    /// Files, best first.
    pub files: Vec<String>,
    /// `path:Qualified.name` entries, best first.
    pub functions: Vec<String>,
    /// Votes of each ranked entity (attempts naming it; in a combination,
    /// the scripted search counts as one more attempt).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub votes: BTreeMap<String, usize>,
    /// The answer set (what set F1 scores): the entities at least half the
    /// attempts named; in a combination, the scripted search's answer when
    /// it answered.
    pub answer: Answer,
    /// Named by an attempt, not in the repository (never ranked).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_in_repository: Vec<NotInRepository>,
    /// Entities the attempts named, counted once per attempt (grounded or not).
    pub named: usize,
    /// Of those, the grounded ones.
    pub grounded: usize,
}

/// The entities an episode answered, in the order written (a function's
/// file right before it unless named earlier), as stored strings; nothing
/// when it did not answer.
pub fn answer_order(e: &Episode) -> Vec<String> {
    if !e.answered() {
        return Vec::new();
    }
    let text = e.turns.last().map_or("", |t| t.text.as_str());
    let mut out: Vec<String> = Vec::new();
    let push = |s: String, out: &mut Vec<String>| {
        if !out.contains(&s) {
            out.push(s);
        }
    };
    for entity in answer_entities(text) {
        push(entity.file_path().to_string(), &mut out);
        if entity.is_function() {
            push(entity.to_string(), &mut out);
        }
    }
    // Whatever the stored answer holds that the text did not give (an
    // episode file written by other means) goes last, as stored.
    for s in &e.answer {
        push(s.clone(), &mut out);
    }
    out
}

/// Ranks the answers of `attempts` (one task's episodes) over `snapshot`,
/// the tree they searched.
pub fn rank(attempts: &[&Episode], snapshot: &Snapshot) -> Ranking {
    let mut order: Vec<String> = Vec::new();
    let mut votes: BTreeMap<String, usize> = BTreeMap::new();
    let mut apart: Vec<NotInRepository> = Vec::new();
    let (mut named, mut grounded) = (0, 0);
    for e in attempts {
        let answer = answer_order(e);
        let (ok, not) = grounding::split(snapshot, &answer);
        named += answer.len();
        grounded += ok.len();
        for n in not {
            if !apart.contains(&n) {
                apart.push(n);
            }
        }
        for s in ok {
            if !votes.contains_key(&s) {
                order.push(s.clone());
            }
            *votes.entry(s).or_default() += 1;
        }
    }
    // Stable: ties keep the order first named.
    order.sort_by(|a, b| votes[b].cmp(&votes[a]));
    let mut answer = Answer::default();
    for s in order.iter().filter(|s| 2 * votes[*s] >= attempts.len()) {
        if let Some(entity) = Entity::from_stored(s) {
            answer.insert(&entity);
        }
    }
    let (files, functions) = split_levels(order);
    Ranking { files, functions, votes, answer, not_in_repository: apart, named, grounded }
}

/// The scripted search and the model together. Ranked: the search's
/// answer in its order, then what the model alone named (in the model's
/// order, by votes). The answer set is the search's when it answered, else
/// the model's. So the top k of the combination holds the search's top k,
/// at every k and both levels, and its set F1 is the search's wherever the
/// search answered: task by task it is never below the search. (Putting
/// what both named first was tried on 72 of the held-out tasks: it moved
/// the search's first file down and lost accuracy@1, -0.014.)
pub fn combine(scripted: &Ranking, model: &Ranking) -> Ranking {
    let both = |a: &[String], b: &[String]| -> Vec<String> {
        let mut out = a.to_vec();
        out.extend(b.iter().filter(|x| !a.contains(x)).cloned());
        out
    };
    let mut votes = scripted.votes.clone();
    for (k, v) in &model.votes {
        *votes.entry(k.clone()).or_default() += v;
    }
    let answered = !scripted.answer.files.is_empty();
    let mut apart = scripted.not_in_repository.clone();
    apart.extend(model.not_in_repository.iter().filter(|n| !scripted.not_in_repository.contains(n)).cloned());
    Ranking {
        files: both(&scripted.files, &model.files),
        functions: both(&scripted.functions, &model.functions),
        votes,
        answer: if answered { scripted.answer.clone() } else { model.answer.clone() },
        not_in_repository: apart,
        named: scripted.named + model.named,
        grounded: scripted.grounded + model.grounded,
    }
}

fn split_levels(order: Vec<String>) -> (Vec<String>, Vec<String>) {
    order.into_iter().partition(|s| !Entity::from_stored(s).is_some_and(|e| e.is_function()))
}

/// Set F1 and the rank of the first gold entity, per level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RankScore {
    pub f1_file: f64,
    pub f1_func: f64,
    /// 1-based rank of the first gold file in the ranking (none: no gold file ranked).
    pub first_gold_file: Option<usize>,
    /// 1-based rank of the first gold function in the ranking.
    pub first_gold_function: Option<usize>,
    /// Gold files of the task (accuracy@k is undefined without any).
    pub gold_files: usize,
    /// Gold functions of the task.
    pub gold_functions: usize,
}

impl RankScore {
    /// Scores `r` against `gold`.
    pub fn of(r: &Ranking, gold: &Gold) -> RankScore {
        let first = |ranked: &[String], gold: &std::collections::BTreeSet<String>| ranked.iter().position(|s| gold.contains(s)).map(|i| i + 1);
        RankScore {
            f1_file: f1(&r.answer.files, &gold.files),
            f1_func: f1(&r.answer.functions, &gold.functions),
            first_gold_file: first(&r.files, &gold.files),
            first_gold_function: first(&r.functions, &gold.functions),
            gold_files: gold.files.len(),
            gold_functions: gold.functions.len(),
        }
    }

    /// File accuracy@k: 1 when a gold file is in the top k; `None` when the
    /// task has no gold file.
    pub fn file_at(&self, k: usize) -> Option<f64> {
        (self.gold_files > 0).then(|| self.first_gold_file.is_some_and(|r| r <= k) as u8 as f64)
    }

    /// Function accuracy@k; `None` when the task has no gold function.
    pub fn func_at(&self, k: usize) -> Option<f64> {
        (self.gold_functions > 0).then(|| self.first_gold_function.is_some_and(|r| r <= k) as u8 as f64)
    }
}

/// One task's ranking by one policy and its score: a line of the ranked
/// JSONL that `eval --ranked` writes and `compare` reads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskRanking {
    pub task_id: String,
    /// `model`, `scripted`, `combined` (or an endpoint).
    pub policy: String,
    pub ranking: Ranking,
    pub score: RankScore,
    /// Entities the ranking and its answer set report (each once).
    #[serde(default)]
    pub reported: usize,
    /// Of those, the ones found in the snapshot when checked again.
    #[serde(default)]
    pub reported_grounded: usize,
}

impl TaskRanking {
    /// `ranking` of task `task_id` by `policy`, scored against `gold`, what
    /// it reports checked again against `snapshot`.
    pub fn new(task_id: &str, policy: &str, ranking: Ranking, gold: &Gold, snapshot: &Snapshot) -> TaskRanking {
        let mut reported: Vec<&String> = ranking.files.iter().chain(&ranking.functions).chain(&ranking.answer.files).chain(&ranking.answer.functions).collect();
        reported.sort();
        reported.dedup();
        let grounded = reported.iter().filter(|s| Entity::from_stored(s).is_some_and(|e| grounding::check(snapshot, &e).is_ok())).count();
        TaskRanking {
            task_id: task_id.into(),
            policy: policy.into(),
            score: RankScore::of(&ranking, gold),
            reported: reported.len(),
            reported_grounded: grounded,
            ranking,
        }
    }
}

/// Means over tasks: set F1, accuracy@k (over the tasks with gold at that
/// level) and the grounded rate (grounded entities over named ones, all
/// tasks together).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RankSummary {
    pub tasks: usize,
    pub f1_file: f64,
    pub f1_func: f64,
    /// File accuracy@1, @3, @5.
    pub file_at: [f64; 3],
    /// Function accuracy@1, @3, @5.
    pub func_at: [f64; 3],
    /// Tasks with a gold function (the function accuracies' denominator).
    pub tasks_with_gold_functions: usize,
    pub named: usize,
    pub grounded: usize,
    pub grounded_rate: f64,
    /// Entities the rankings report, and of those the grounded share.
    pub reported: usize,
    pub reported_grounded_rate: f64,
}

impl RankSummary {
    /// The summary of `rows`.
    pub fn of(rows: &[TaskRanking]) -> RankSummary {
        let mean = |v: Vec<f64>| if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
        let at = |f: &dyn Fn(&RankScore, usize) -> Option<f64>| KS.map(|k| mean(rows.iter().filter_map(|r| f(&r.score, k)).collect()));
        let named = rows.iter().map(|r| r.ranking.named).sum();
        let grounded = rows.iter().map(|r| r.ranking.grounded).sum();
        RankSummary {
            tasks: rows.len(),
            f1_file: mean(rows.iter().map(|r| r.score.f1_file).collect()),
            f1_func: mean(rows.iter().map(|r| r.score.f1_func).collect()),
            file_at: at(&|s, k| s.file_at(k)),
            func_at: at(&|s, k| s.func_at(k)),
            tasks_with_gold_functions: rows.iter().filter(|r| r.score.gold_functions > 0).count(),
            named,
            grounded,
            grounded_rate: grounding::rate(grounded, named),
            reported: rows.iter().map(|r| r.reported).sum(),
            reported_grounded_rate: grounding::rate(rows.iter().map(|r| r.reported_grounded).sum(), rows.iter().map(|r| r.reported).sum()),
        }
    }

    /// The table's header.
    pub const HEADER: &'static str = "policy     tasks f1_file f1_func file@1 file@3 file@5 func@1 func@3 func@5 grounded";

    /// One row under [`RankSummary::HEADER`]; the grounded rate is of the
    /// entities the policy named, the ranking holding only grounded ones.
    pub fn row(&self, label: &str) -> String {
        let [f1, f3, f5] = self.file_at;
        let [g1, g3, g5] = self.func_at;
        format!(
            "{label:<10} {:>5} {:>7.3} {:>7.3} {f1:>6.3} {f3:>6.3} {f5:>6.3} {g1:>6.3} {g3:>6.3} {g5:>6.3} {:>8.3}",
            self.tasks, self.f1_file, self.f1_func, self.grounded_rate
        )
    }
}

impl Hits {
    /// The ranking a user or an evaluation sees: the files, then the
    /// functions (every file of a ranked function is ranked too, after the
    /// rest), and the answer set scored by F1: the first file and those
    /// within `answer_gap` of its score (at most `answer_files`), and for
    /// each, its best function when within `answer_gap` of the best one.
    pub fn ranking(&self, cfg: &SearchConfig) -> Ranking {
        let mut files: Vec<String> = self.files.iter().map(|f| f.path.clone()).collect();
        for e in &self.entities {
            if !files.contains(&e.path) {
                files.push(e.path.clone());
            }
        }
        let functions: Vec<String> = self.entities.iter().map(EntityHit::entity).collect();
        let mut answer = Answer::default();
        let first = self.files.first().map_or(0.0, |f| f.score);
        let best_function = self.entities.first().map_or(0.0, |e| e.score);
        for f in self.files.iter().take(cfg.answer_files.max(1)).filter(|f| f.score >= cfg.answer_gap * first) {
            if let Some(e) = Entity::from_stored(&f.path) {
                answer.insert(&e);
            }
            if let Some(best) = self.entities.iter().find(|e| e.path == f.path).filter(|e| e.score >= cfg.answer_gap * best_function) {
                if let Some(e) = Entity::from_stored(&best.entity()) {
                    answer.insert(&e);
                }
            }
        }
        let named = files.len() + functions.len();
        let votes = files.iter().chain(&functions).map(|s| (s.clone(), 1)).collect();
        Ranking { files, functions, votes, answer, not_in_repository: Vec::new(), named, grounded: named }
    }
}

/// The ranking of `issue` over `snapshot` by the [search index](crate::search):
/// its index from `cache` (built on first use), the query, the search.
pub fn search_snapshot(cache: &IndexCache, snapshot: &Snapshot, issue: &str, cfg: &SearchConfig) -> Result<(Hits, Ranking), SearchError> {
    let hits = crate::search::search_hits(cache, snapshot, issue, cfg)?;
    let ranking = hits.ranking(cfg);
    Ok((hits, ranking))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::episode::{Phase, StopReason, TurnRecord};
    use crate::grounding::tests::snapshot;
    use crate::grounding::Ungrounded;

    /// An episode that answered `text` in one turn.
    pub(crate) fn answered(text: &str) -> Episode {
        let answer = crate::answer::parse_answer(text);
        Episode {
            task_id: "t".into(),
            sample: 0,
            tokens: vec![],
            loss_mask: vec![],
            logprobs: vec![],
            prompt_tokens: 0,
            turns: vec![TurnRecord { text: text.into(), tokens: 1, calls: vec![], response_tokens: 0, generate_seconds: 0.0, tools_seconds: 0.0 }],
            phase: Phase::Done(StopReason::Answer),
            answer: answer.files.iter().chain(answer.functions.iter()).cloned().collect(),
            score: None,
            seconds: 0.0,
        }
    }

    fn gold(files: &[&str], functions: &[&str]) -> Gold {
        Gold { files: files.iter().map(|s| s.to_string()).collect(), functions: functions.iter().map(|s| s.to_string()).collect() }
    }

    #[test]
    fn made_up_function_and_path_leave_the_ranking_and_are_listed_apart() {
        // The model's answer of the issue's example: a function that is
        // nowhere, an expression, a path that does not exist.
        let e = answered("pkg/a.py:bridge\npkg/a.py:lines.splitlines()\nsessions.py\npkg/a.py:Session.send");
        let r = rank(&[&e], &snapshot());
        assert_eq!(r.files, vec!["pkg/a.py"]);
        assert_eq!(r.functions, vec!["pkg/a.py:Session.send"]);
        let apart: Vec<(&str, Ungrounded)> = r.not_in_repository.iter().map(|n| (n.entity.as_str(), n.why)).collect();
        assert_eq!(
            apart,
            vec![
                ("pkg/a.py:bridge", Ungrounded::NoFunction),
                ("pkg/a.py:lines.splitlines()", Ungrounded::NoFunction),
                ("sessions.py", Ungrounded::NoFile),
            ]
        );
        assert!(!r.answer.files.contains("sessions.py") && !r.answer.functions.contains("pkg/a.py:bridge"));
        // pkg/a.py, bridge, lines.splitlines(), sessions.py, Session.send: 2 of 5.
        assert_eq!((r.named, r.grounded), (5, 2));
    }

    #[test]
    fn ranking_follows_the_order_written() {
        let e = answered("README.md\npkg/a.py:helper");
        let r = rank(&[&e], &snapshot());
        assert_eq!(r.files, vec!["README.md", "pkg/a.py"]);
    }

    #[test]
    fn accuracy_at_k_by_hand() {
        // Ranked files f1..f6; gold {f4, z}: first gold at rank 4.
        let r = Ranking {
            files: ["f1", "f2", "f3", "f4", "f5", "f6"].map(String::from).to_vec(),
            functions: vec!["f2:g".into(), "f1:h".into()],
            answer: Answer::from_strings(["f1", "f4", "f2:g"]),
            ..Ranking::default()
        };
        let s = RankScore::of(&r, &gold(&["f4", "z"], &["f1:h"]));
        assert_eq!(s.first_gold_file, Some(4));
        assert_eq!(KS.map(|k| s.file_at(k)), [Some(0.0), Some(0.0), Some(1.0)]);
        assert_eq!(KS.map(|k| s.func_at(k)), [Some(0.0), Some(1.0), Some(1.0)]);
        // Answer files {f1, f2, f4} (f2 from f2:g) vs gold {f4, z}: P 1/3, R 1/2, F1 0.4.
        assert!((s.f1_file - 0.4).abs() < 1e-12, "{}", s.f1_file);
        // No gold function: undefined, left out of the mean.
        let none = RankScore::of(&r, &gold(&["f1"], &[]));
        assert_eq!(none.func_at(1), None);
        assert_eq!(none.file_at(1), Some(1.0));
        let rows = [
            TaskRanking { task_id: "a".into(), policy: "p".into(), ranking: r.clone(), score: s, reported: 0, reported_grounded: 0 },
            TaskRanking { task_id: "b".into(), policy: "p".into(), ranking: r.clone(), score: none, reported: 0, reported_grounded: 0 },
        ];
        let sum = RankSummary::of(&rows);
        assert_eq!(sum.file_at, [0.5, 0.5, 1.0]);
        assert_eq!(sum.func_at, [0.0, 1.0, 1.0]);
        assert_eq!(sum.tasks_with_gold_functions, 1);
    }

    #[test]
    fn combined_never_ranks_below_the_scripted_search() {
        // The search answers two files; the model a made-up file and the
        // search's second file first. The combination keeps the search's
        // order: every gold file the search has in its top k (any k) the
        // combination has too, and its answer set is the search's, so is
        // its F1. (Ranking what both named first would put README.md at
        // rank 1 and lose accuracy@1 where pkg/a.py is gold.)
        let s = snapshot();
        let scripted = rank(&[&answered("pkg/a.py\nREADME.md")], &s);
        let model = rank(&[&answered("nowhere.py\nREADME.md")], &s);
        let c = combine(&scripted, &model);
        assert_eq!(c.files, vec!["pkg/a.py", "README.md"]);
        assert_eq!(c.answer, scripted.answer);
        assert_eq!(c.not_in_repository.len(), 1);
        for g in [gold(&["pkg/a.py"], &[]), gold(&["README.md"], &[]), gold(&["x.py", "pkg/a.py"], &[])] {
            let (a, b) = (RankScore::of(&scripted, &g), RankScore::of(&c, &g));
            for k in [1, 2, 3, 5] {
                assert!(b.file_at(k) >= a.file_at(k), "k {k}: {b:?} vs {a:?}");
            }
            assert_eq!(a.f1_file, b.f1_file);
        }
        // The model adds what the search missed, after the search's own.
        let model = rank(&[&answered("pkg/a.py:helper")], &s);
        let c = combine(&scripted, &model);
        assert_eq!(c.files, vec!["pkg/a.py", "README.md"]);
        assert_eq!(RankScore::of(&c, &gold(&["pkg/a.py"], &["pkg/a.py:helper"])).first_gold_function, Some(1));
        assert_eq!(RankScore::of(&scripted, &gold(&["pkg/a.py"], &["pkg/a.py:helper"])).first_gold_function, None);
        // When the search answers nothing, the model's grounded answer stands.
        let silent = rank(&[&answered("I found nothing relevant.")], &s);
        let c = combine(&silent, &model);
        assert_eq!(c.files, vec!["pkg/a.py"]);
        assert_eq!(c.answer, model.answer);
    }
}
