//! Recursive Tournament Voting: the attempts meet in pairs, a judge picks
//! each pair's winner, winners meet again until one is left; an odd one out
//! advances to the next round without a match (a bye) and is placed last.
//! The first round's order is a seeded shuffle, so a fixed seed gives the
//! same brackets. Every task's matches of a round go to the judge in one
//! batch (a model judge answers them together).

use super::judge::{Comparison, Judge, Side};
use super::summary::AttemptSummary;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

/// One match of a bracket (attempt indices within the task).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatchRecord {
    pub round: usize,
    pub a: usize,
    pub b: usize,
    pub winner: usize,
    /// Why the fallback decided, when the judge did not.
    pub fallback: Option<String>,
    pub retries: usize,
}

/// One task's tournament.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tournament {
    /// The winning attempt (None without entrants).
    pub winner: Option<usize>,
    pub matches: Vec<MatchRecord>,
    /// `(round, attempt)` of every bye.
    pub byes: Vec<(usize, usize)>,
    pub judge_tokens: usize,
    pub judge_seconds: f64,
}

/// The first round's order of `n` entrants for task `task` under `seed`.
pub fn first_round(n: usize, seed: u64, task: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ (task as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    order.shuffle(&mut rng);
    order
}

/// Runs every task's tournament: `entrants[t]` are task t's attempt
/// summaries (indexed by their position), `issues[t]` its issue text.
pub fn run_tournaments(issues: &[&str], entrants: &[Vec<&AttemptSummary>], seed: u64, judge: &mut dyn Judge) -> Vec<Tournament> {
    let mut alive: Vec<Vec<usize>> = entrants.iter().enumerate().map(|(t, e)| first_round(e.len(), seed, t)).collect();
    let mut out: Vec<Tournament> = entrants
        .iter()
        .map(|_| Tournament { winner: None, matches: Vec::new(), byes: Vec::new(), judge_tokens: 0, judge_seconds: 0.0 })
        .collect();
    let mut round = 0;
    loop {
        // (task, a, b) of every match of this round, task by task.
        let mut pairs: Vec<(usize, usize, usize)> = Vec::new();
        for (t, list) in alive.iter().enumerate() {
            for p in list.chunks_exact(2) {
                pairs.push((t, p[0], p[1]));
            }
        }
        if pairs.is_empty() {
            break;
        }
        let batch: Vec<Comparison<'_>> =
            pairs.iter().map(|&(t, a, b)| Comparison { issue: issues[t], a: entrants[t][a], b: entrants[t][b] }).collect();
        let verdicts = judge.compare(&batch);
        assert_eq!(verdicts.len(), batch.len(), "judge {} answered {} of {} comparisons", judge.name(), verdicts.len(), batch.len());
        let mut next: Vec<Vec<usize>> = vec![Vec::new(); alive.len()];
        for (&(t, a, b), v) in pairs.iter().zip(verdicts) {
            let winner = if v.winner == Side::A { a } else { b };
            next[t].push(winner);
            let rec = &mut out[t];
            rec.judge_tokens += v.tokens;
            rec.judge_seconds += v.seconds;
            rec.matches.push(MatchRecord { round, a, b, winner, fallback: v.fallback, retries: v.retries });
        }
        for (t, list) in alive.iter().enumerate() {
            if list.len() % 2 == 1 {
                let bye = *list.last().expect("odd list is not empty");
                if list.len() > 1 {
                    out[t].byes.push((round, bye));
                }
                next[t].push(bye);
            }
        }
        alive = next;
        round += 1;
    }
    for (t, list) in alive.iter().enumerate() {
        out[t].winner = list.first().copied();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scaling::judge::Verdict;
    use std::collections::BTreeMap;

    /// A summary whose quality the test judge reads from `evidence_calls`.
    fn entrant(i: usize, quality: usize) -> AttemptSummary {
        AttemptSummary {
            attempt: i,
            turns: 1,
            calls: Vec::new(),
            surfaced: BTreeMap::new(),
            answer: vec![format!("f{i}.py")],
            support: BTreeMap::new(),
            evidence_calls: quality,
            answered: true,
            written: None,
            written_tokens: 0,
        }
    }

    /// Picks the higher quality; counts the comparisons and batches it saw.
    #[derive(Default)]
    struct Best {
        batches: Vec<usize>,
    }

    impl Judge for Best {
        fn name(&self) -> String {
            "best".into()
        }
        fn compare(&mut self, batch: &[Comparison<'_>]) -> Vec<Verdict> {
            self.batches.push(batch.len());
            batch
                .iter()
                .map(|c| Verdict {
                    winner: if c.b.evidence_calls > c.a.evidence_calls { Side::B } else { Side::A },
                    fallback: None,
                    retries: 0,
                    tokens: 1,
                    seconds: 0.0,
                })
                .collect()
        }
    }

    #[test]
    fn brackets_for_one_to_nine_attempts_crown_the_best_with_byes() {
        for n in 1..=9usize {
            // Distinct qualities in a scrambled order; the best is attempt `best`.
            let qualities: Vec<usize> = (0..n).map(|i| (i * 11 + 3) % n + 1).collect();
            let best = (0..n).max_by_key(|&i| qualities[i]).unwrap();
            let people: Vec<AttemptSummary> = (0..n).map(|i| entrant(i, qualities[i])).collect();
            let entrants = vec![people.iter().collect::<Vec<_>>()];
            let mut judge = Best::default();
            let t = run_tournaments(&["issue"], &entrants, 11, &mut judge).remove(0);
            assert_eq!(t.winner, Some(best), "n={n}");
            assert_eq!(t.matches.len(), n - 1, "n={n}: a single-elimination bracket has n-1 matches");
            assert_eq!(t.judge_tokens, n - 1);
            // Rounds: ceil(log2 n); every entrant but the winner loses exactly once.
            let rounds = if n == 1 { 0 } else { (n as f64).log2().ceil() as usize };
            assert_eq!(t.matches.iter().map(|m| m.round + 1).max().unwrap_or(0), rounds, "n={n}");
            let mut losses = vec![0; n];
            for m in &t.matches {
                losses[if m.winner == m.a { m.b } else { m.a }] += 1;
                assert!(m.winner == m.a || m.winner == m.b);
            }
            for (i, l) in losses.iter().enumerate() {
                assert_eq!(*l, usize::from(i != best), "n={n}, attempt {i}");
            }
            // A bye in every round whose field is odd (and larger than one).
            let mut field = n;
            let mut odd_rounds = 0;
            while field > 1 {
                odd_rounds += field % 2;
                field = field.div_ceil(2);
            }
            assert_eq!(t.byes.len(), odd_rounds, "n={n}: byes {:?}", t.byes);
            // Fixed seed, same bracket.
            let again = run_tournaments(&["issue"], &entrants, 11, &mut Best::default()).remove(0);
            assert_eq!(again, t, "n={n}");
        }
    }

    #[test]
    fn tasks_share_each_rounds_batch_and_seeds_change_the_order() {
        let a: Vec<AttemptSummary> = (0..8).map(|i| entrant(i, i)).collect();
        let b: Vec<AttemptSummary> = (0..3).map(|i| entrant(i, 3 - i)).collect();
        let entrants = vec![a.iter().collect::<Vec<_>>(), b.iter().collect::<Vec<_>>()];
        let mut judge = Best::default();
        let out = run_tournaments(&["one", "two"], &entrants, 5, &mut judge);
        assert_eq!(out[0].winner, Some(7));
        assert_eq!(out[1].winner, Some(0));
        // Round 1: 4 + 1 matches, round 2: 2 + 1, round 3: 1.
        assert_eq!(judge.batches, vec![5, 3, 1]);
        let orders: std::collections::BTreeSet<Vec<usize>> = (0..6).map(|s| first_round(8, s, 0)).collect();
        assert!(orders.len() > 1, "seeds shuffle the first round");
        assert_eq!(first_round(8, 3, 0), first_round(8, 3, 0));
        let mut sorted = first_round(8, 3, 1);
        sorted.sort();
        assert_eq!(sorted, (0..8).collect::<Vec<_>>());
    }
}
