//! Bringing the requested episodes' parked caches up to date before a
//! decode batch: each must hold all its tokens but the last.
//!
//! New episodes are prefilled from an empty cache, episodes with a parked
//! cache from where it stops (the tool responses and the next assistant
//! header). Identical token sequences among new episodes (a group's shared
//! prompt) are prefilled once and the parked cache is shared by the group
//! (it is only ever read: stacking copies it). Rows are prefilled in groups
//! of at most `max_prefill_tokens` (rows x longest delta), a group's
//! columns in pieces of that many tokens in all, so no prefill forward
//! holds more. A new episode whose prompt opens with the policy's fixed
//! prefix starts from the prefix's kept cache (prefilled alone on first
//! use) and is prefilled from there like a parked one.

use super::limits::prefill_groups;
use super::{ModelPolicy, Parked};
use lm::model::cache::{KvCache, Positions};
use crate::error::{Error, Result};
use candle_core::Tensor;
use rand::Rng;
use rollout::policy::TurnRequest;
use std::collections::HashMap;
use std::sync::Arc;

/// One row to prefill: request index, tokens already cached, tokens to add.
struct Row<'a> {
    req: usize,
    seen: usize,
    delta: &'a [u32],
}

pub(super) fn bring_up_to_date<R: Rng>(p: &mut ModelPolicy<'_, R>, reqs: &[TurnRequest<'_>]) -> Result<()> {
    let mut fresh: Vec<Row<'_>> = Vec::new();
    let mut stale: Vec<Row<'_>> = Vec::new();
    // Followers share the cache of the fresh row with the same tokens.
    let mut leaders: HashMap<&[u32], usize> = HashMap::new();
    let mut followers: Vec<(usize, usize)> = Vec::new();
    for (i, r) in reqs.iter().enumerate() {
        if r.tokens.len() < 2 {
            return Err(Error::invalid("policy", format!("episode {} asks for a turn with {} token(s); a turn needs the prompt", r.episode, r.tokens.len())));
        }
        let target = r.tokens.len() - 1;
        match p.parked.get(&r.episode).map(|pk| pk.seen) {
            Some(seen) if seen == target => {}
            Some(seen) if seen < target => stale.push(Row { req: i, seen, delta: &r.tokens[seen..target] }),
            _ => {
                // No cache (new or evicted), or one past these tokens: from scratch.
                p.parked.remove(&r.episode);
                let prefix = &r.tokens[..target];
                match leaders.get(prefix) {
                    Some(&leader) => followers.push((i, leader)),
                    None => {
                        leaders.insert(prefix, i);
                        match prefix_cache(p, prefix)? {
                            Some(cache) => {
                                let seen = cache.slots();
                                p.parked.insert(r.episode, Parked { cache, seen });
                                stale.push(Row { req: i, seen, delta: &prefix[seen..] });
                            }
                            None => fresh.push(Row { req: i, seen: 0, delta: prefix }),
                        }
                    }
                }
            }
        }
    }
    prefill_rows(p, reqs, &fresh)?;
    prefill_rows(p, reqs, &stale)?;
    for (i, leader) in followers {
        let shared = p.parked.get(&reqs[leader].episode).cloned().expect("the leader was just prefilled");
        p.parked.insert(reqs[i].episode, shared);
        p.stats.shared_prefills += 1;
    }
    Ok(())
}

/// The kept cache of the policy's fixed prefix when `tokens` (a new
/// episode's prompt but its last token) open with the prefix and go on past
/// it; prefilled alone (in pieces of `max_prefill_tokens`) on first use.
fn prefix_cache<R: Rng>(p: &mut ModelPolicy<'_, R>, tokens: &[u32]) -> Result<Option<Arc<KvCache>>> {
    let Some(prefix) = &p.prefix else { return Ok(None) };
    let n = prefix.tokens.len();
    if tokens.len() <= n || tokens[..n] != prefix.tokens[..] {
        return Ok(None);
    }
    if let Some(cache) = &prefix.cache {
        p.stats.prefix_hits += 1;
        return Ok(Some(cache.clone()));
    }
    let device = p.model.device().clone();
    let mut cache = KvCache::new(p.model.config().num_hidden_layers, 1);
    for start in (0..n).step_by(p.limits.max_prefill_tokens) {
        let len = p.limits.max_prefill_tokens.min(n - start);
        let tokens = Tensor::from_vec(prefix.tokens[start..start + len].to_vec(), (1, len), &device)?;
        let pos = (start as i64..(start + len) as i64).collect();
        p.model.forward(&tokens, &Positions { batch: 1, len, data: pos, segments: None }, Some(&mut cache))?;
    }
    p.stats.prefill_tokens += n;
    // Compact (no spare capacity): it is kept, and copied at every use.
    let cache = Arc::new(cache.extract_row(0)?);
    if let Some(prefix) = p.prefix.as_mut() {
        prefix.cache = Some(cache.clone());
    }
    Ok(Some(cache))
}

/// Prefill `rows` in groups within `max_prefill_tokens`; park each row.
fn prefill_rows<R: Rng>(p: &mut ModelPolicy<'_, R>, reqs: &[TurnRequest<'_>], rows: &[Row<'_>]) -> Result<()> {
    let deltas: Vec<usize> = rows.iter().map(|r| r.delta.len()).collect();
    for group in prefill_groups(&deltas, p.limits.max_prefill_tokens) {
        prefill_group(p, reqs, &rows[group])?;
    }
    Ok(())
}

fn prefill_group<R: Rng>(p: &mut ModelPolicy<'_, R>, reqs: &[TurnRequest<'_>], rows: &[Row<'_>]) -> Result<()> {
    let width = rows.iter().map(|r| r.delta.len()).max().unwrap_or(0);
    let parts: Vec<Arc<KvCache>> = rows.iter().filter_map(|r| p.parked.remove(&reqs[r.req].episode).map(|pk| pk.cache)).collect();
    let mut cache = if parts.is_empty() {
        KvCache::new(p.model.config().num_hidden_layers, rows.len())
    } else if parts.len() == rows.len() {
        KvCache::stack_with_room(&parts.iter().map(|c| c.as_ref()).collect::<Vec<_>>(), width)?
    } else {
        return Err(Error::invalid("policy", "a prefill group mixes new episodes and parked ones"));
    };
    drop(parts);
    // Left-padded deltas, fed in pieces of at most max_prefill_tokens in all.
    let piece = (p.limits.max_prefill_tokens / rows.len()).clamp(1, width.max(1));
    let device = p.model.device().clone();
    let mut start = 0;
    while start < width {
        let len = piece.min(width - start);
        let (mut toks, mut pos) = (Vec::with_capacity(rows.len() * len), Vec::with_capacity(rows.len() * len));
        for r in rows {
            let pad = width - r.delta.len();
            for col in start..start + len {
                if col < pad {
                    toks.push(0u32);
                    pos.push(-1i64);
                } else {
                    toks.push(r.delta[col - pad]);
                    pos.push((r.seen + col - pad) as i64);
                }
            }
        }
        let tokens = Tensor::from_vec(toks, (rows.len(), len), &device)?;
        p.model.forward(&tokens, &Positions { batch: rows.len(), len, data: pos, segments: None }, Some(&mut cache))?;
        start += len;
    }
    p.stats.prefill_tokens += rows.iter().map(|r| r.delta.len()).sum::<usize>();
    for (b, r) in rows.iter().enumerate() {
        let seen = r.seen + r.delta.len();
        p.parked.insert(reqs[r.req].episode, Parked { cache: Arc::new(cache.extract_row(b)?), seen });
    }
    Ok(())
}
