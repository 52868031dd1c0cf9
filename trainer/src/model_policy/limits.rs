//! What bounds a rollout's memory: rows x tokens per decode batch, KV slots
//! held at once (parked caches and the decoding batch's), tokens per
//! prefill forward.

/// The rollout's bounds (`[rollout]` in a run config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RolloutLimits {
    /// Rows x (tokens + new tokens) in one decode batch.
    pub max_batch_tokens: usize,
    /// KV slots (tokens x layers' keys and values) held at once, parked
    /// caches included; `None`: unbounded.
    pub max_kv_tokens: Option<usize>,
    /// Tokens in one prefill forward (longer prefills are split by rows,
    /// then by time).
    pub max_prefill_tokens: usize,
    /// Episodes running at once (whole groups, at least one); `None`: all
    /// of a call's episodes.
    pub max_live: Option<usize>,
}

impl RolloutLimits {
    /// Only a decode-batch bound, as before KV budgets.
    pub fn batch_tokens(max_batch_tokens: usize) -> Self {
        RolloutLimits { max_batch_tokens: max_batch_tokens.max(1), max_kv_tokens: None, max_prefill_tokens: usize::MAX, max_live: None }
    }
}

/// KV slots a decode batch of these requests (`(tokens, max_new)` each)
/// may hold at once: the stacked cache, `rows` x the longest row plus its
/// new tokens (left padding included), and the finished rows' parked
/// copies beside it.
pub fn batch_kv_slots(rows: &[(usize, usize)]) -> usize {
    let width = rows.iter().map(|&(t, n)| t + n).max().unwrap_or(0);
    rows.len() * width + rows.iter().map(|&(t, n)| t + n).sum::<usize>()
}

/// Prefill pieces: consecutive runs of rows whose `rows x longest delta`
/// stays within `max_tokens` (a row longer than that is alone). Returns the
/// index ranges.
pub fn prefill_groups(deltas: &[usize], max_tokens: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < deltas.len() {
        let mut end = start + 1;
        let mut longest = deltas[start];
        while end < deltas.len() && (end + 1 - start) * longest.max(deltas[end]) <= max_tokens {
            longest = longest.max(deltas[end]);
            end += 1;
        }
        out.push(start..end);
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_slots_count_padding_and_parked_copies() {
        // Widths 10+4 and 6+4: 2 rows x 14 stacked + 14 + 10 parked.
        assert_eq!(batch_kv_slots(&[(10, 4), (6, 4)]), 2 * 14 + 24);
        assert_eq!(batch_kv_slots(&[]), 0);
    }

    #[test]
    fn prefill_groups_stay_within_the_bound() {
        let deltas = [100, 100, 300, 50, 1000, 10];
        let groups = prefill_groups(&deltas, 400);
        assert_eq!(groups, vec![0..2, 2..3, 3..4, 4..5, 5..6]);
        for g in &groups {
            let longest = deltas[g.clone()].iter().max().unwrap();
            assert!(g.len() == 1 || g.len() * longest <= 400);
        }
        assert_eq!(prefill_groups(&deltas, usize::MAX), vec![0..6]);
    }
}
