//! Openings of teacher trajectories, for a curriculum before whole-trajectory
//! SFT: the issue (the first user turn) and the first `turns` assistant turns
//! with the tool outputs between them. The system prompt (tools and
//! instructions, the same few hundred tokens in every episode) is left out,
//! so an opening of one turn is ~100 tokens where the whole trajectory is
//! ~1,400: a small model can see many more examples of the turns that copy
//! from context (the names into grep patterns, grep's paths into
//! read_file) for the same compute.

use super::filter::SftExample;
use super::{Episode, StopReason};
use std::ops::Range;

/// The token span of an opening: from the turn start (ChatML's
/// `<|im_start|>`) of the user turn that precedes the first policy token, to
/// the end of the `turns`-th run of policy tokens (the whole sequence when it has fewer). `None` when there is
/// no policy token or no user turn before it.
pub fn opening_span(tokens: &[u32], loss_mask: &[u8], turns: usize, turn_start: u32) -> Option<Range<usize>> {
    let first_policy = loss_mask.iter().position(|&m| m == 1)?;
    // The turn openers before the first policy token: [system,] user, assistant.
    let openers: Vec<usize> = (0..first_policy).filter(|&i| tokens[i] == turn_start).collect();
    let start = *openers.len().checked_sub(2).and_then(|i| openers.get(i))?;
    let mut seen = 0;
    let mut end = loss_mask.len();
    for i in first_policy..loss_mask.len() {
        let run_ends = loss_mask[i] == 1 && loss_mask.get(i + 1).copied().unwrap_or(0) == 0;
        if run_ends {
            seen += 1;
            if seen == turns {
                end = i + 1;
                break;
            }
        }
    }
    Some(start..end)
}

/// The openings of every episode that ended with an answer (a teacher's
/// early turns are its search whatever the final F1; the whole-trajectory
/// filter judges the rest).
pub fn openings(episodes: &[Episode], turns: usize, turn_start: u32) -> Vec<SftExample> {
    episodes
        .iter()
        .filter(|e| e.stop_reason() == Some(StopReason::Answer))
        .filter_map(|e| {
            let span = opening_span(&e.tokens, &e.loss_mask, turns, turn_start)?;
            Some(SftExample {
                task_id: e.task_id.clone(),
                sample: e.sample,
                tokens: e.tokens[span.clone()].to_vec(),
                loss_mask: e.loss_mask[span].to_vec(),
                truncated_tokens: 0,
                reward: e.score.map_or(0.0, |s| s.reward),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u32 = 100; // <|im_start|>

    /// system (S 1 2), user (S 3 4), assistant header (S 5), then turns:
    /// policy 7 7 | tool S 8 8 | S 5 policy 9 9 9 | tool S 8 | S 5 policy 6.
    fn sequence(with_system: bool) -> (Vec<u32>, Vec<u8>) {
        let mut t: Vec<(u32, u8)> = Vec::new();
        if with_system {
            t.extend([(S, 0), (1, 0), (2, 0)]);
        }
        t.extend([(S, 0), (3, 0), (4, 0), (S, 0), (5, 0)]);
        t.extend([(7, 1), (7, 1)]);
        t.extend([(S, 0), (8, 0), (8, 0), (S, 0), (5, 0)]);
        t.extend([(9, 1), (9, 1), (9, 1)]);
        t.extend([(S, 0), (8, 0), (S, 0), (5, 0)]);
        t.extend([(6, 1)]);
        t.into_iter().unzip()
    }

    #[test]
    fn an_opening_drops_the_system_turn_and_stops_after_the_nth_policy_turn() {
        let (tokens, mask) = sequence(true);
        let one = opening_span(&tokens, &mask, 1, S).unwrap();
        assert_eq!(&tokens[one.clone()], &[S, 3, 4, S, 5, 7, 7]);
        let two = opening_span(&tokens, &mask, 2, S).unwrap();
        assert_eq!(&tokens[two.clone()], &[S, 3, 4, S, 5, 7, 7, S, 8, 8, S, 5, 9, 9, 9]);
        assert_eq!(mask[two].iter().filter(|&&m| m == 1).count(), 5);
        // More turns than the episode has: all of it but the system turn.
        let all = opening_span(&tokens, &mask, 9, S).unwrap();
        assert_eq!(all, 3..tokens.len());
    }

    #[test]
    fn without_a_system_turn_the_opening_starts_at_the_user_turn() {
        let (tokens, mask) = sequence(false);
        assert_eq!(opening_span(&tokens, &mask, 1, S).unwrap(), 0..7);
    }

    #[test]
    fn no_policy_token_or_no_user_turn_gives_none() {
        let (tokens, _) = sequence(true);
        assert_eq!(opening_span(&tokens, &vec![0; tokens.len()], 1, S), None);
        // Policy tokens right after a single opener: no user turn before them.
        assert_eq!(opening_span(&[S, 5, 7], &[0, 0, 1], 1, S), None);
    }
}
