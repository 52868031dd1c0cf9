//! Our model as a rollout [`Policy`]: every live episode's turn is generated
//! in one batch with the KV cache, within [`RolloutLimits`].
//!
//! Between turns each episode's cache is parked as a compact single-row
//! cache (in the model's dtype). A turn first brings every requested
//! episode's cache up to all its tokens but the last ([`prefill`]): the
//! tool responses since its last turn, or the whole prompt for a new
//! episode, where the identical prompts of a group are prefilled once and
//! their parked cache shared; prefill forwards hold at most
//! `max_prefill_tokens`. Then the parked caches are stacked (left-padded
//! with invisible slots, room for the new tokens), each row's last token is
//! fed, and decoding proceeds one token per step; a row that ends its turn
//! is parked again and leaves the batch.
//!
//! Requests are split into decode batches whose rows x (tokens + new
//! tokens) stay under `max_batch_tokens` and whose KV slots, with every
//! other parked cache, stay under `max_kv_tokens`; when even one request
//! does not fit, the parked caches of other episodes are dropped (evicted:
//! they are prefilled again at their next turn), so the budget always holds.
//! Each episode samples from its own random stream (seeded once per
//! `next_turns` call from the caller's RNG), so neither the batches nor the
//! evictions change what it draws.
//!
//! With a fixed prefix ([`ModelPolicy::with_prefix`]: the system prompt and
//! tool schemas every prompt opens with), a new episode's prompt is
//! prefilled in two parts: the prefix, whose cache is computed once and kept
//! for every later episode (and every later call: the MCP server keeps its
//! policy), then the rest. The split is the same whether the prefix's cache
//! is new or kept, so reusing it changes no bit of any episode.

pub mod limits;
pub mod load;
mod prefill;

use lm::generate::{decode, DecodeStep, Draws, Generation};
use lm::model::cache::{KvCache, Positions};
use lm::model::CausalLm;
use lm::sampling::{DrawStreams, SamplerConfig};
use candle_core::{IndexOp, Tensor};
pub use limits::RolloutLimits;
use limits::batch_kv_slots;
use rand::Rng;
use rollout::policy::{Policy, PolicyError, TurnOutput, TurnRequest};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A parked episode: its cache (shared by the episodes of a group until
/// their first turn) and how many of its tokens the cache holds.
#[derive(Clone)]
struct Parked {
    cache: Arc<KvCache>,
    seen: usize,
}

/// The tokens every prompt opens with, and their cache once prefilled.
struct Prefix {
    tokens: Vec<u32>,
    cache: Option<Arc<KvCache>>,
}

/// What the policy did, for tests and logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicyStats {
    /// Tokens run through prefill forwards.
    pub prefill_tokens: usize,
    /// New episodes whose prompt started from the kept cache of the fixed prefix.
    pub prefix_hits: usize,
    /// New episodes whose prompt was already prefilled for another of the call.
    pub shared_prefills: usize,
    /// Parked caches dropped to stay within `max_kv_tokens`.
    pub evictions: usize,
    /// Most KV slots held at once (parked + the decode batch's bound).
    pub peak_kv_slots: usize,
    /// Decode batches run.
    pub batches: usize,
    /// One-row decodes' drafted tokens ([`lm::lookup`]) and those the model picked too.
    pub drafted: usize,
    pub accepted: usize,
}

/// Qwen3 generating assistant turns.
pub struct ModelPolicy<'m, R: Rng> {
    model: &'m CausalLm,
    sampler: SamplerConfig,
    rng: R,
    stop_tokens: Vec<u32>,
    limits: RolloutLimits,
    parked: HashMap<u64, Parked>,
    stats: PolicyStats,
    /// Set: the decode stops before its next token ([`Policy::interrupt_on`]).
    interrupt: Option<Arc<AtomicBool>>,
    /// Seeds drawn from `rng` ([`Policy::draws`]).
    draws: u64,
    /// The fixed prompt prefix ([`Self::with_prefix`]).
    prefix: Option<Prefix>,
}

impl<'m, R: Rng> ModelPolicy<'m, R> {
    /// `stop_tokens` end a turn (Qwen3: `<|im_end|>`, `<|endoftext|>`).
    pub fn new(model: &'m CausalLm, sampler: SamplerConfig, rng: R, stop_tokens: Vec<u32>, limits: RolloutLimits) -> Self {
        let limits = RolloutLimits { max_batch_tokens: limits.max_batch_tokens.max(1), max_prefill_tokens: limits.max_prefill_tokens.max(1), ..limits };
        ModelPolicy { model, sampler, rng, stop_tokens, limits, parked: HashMap::new(), stats: PolicyStats::default(), interrupt: None, draws: 0, prefix: None }
    }

    /// Prefill `tokens` once and start every new episode whose prompt opens
    /// with them (and goes on past them) from that cache
    /// ([`rollout::episode::driver::fixed_prefix`]); empty: no prefix.
    pub fn with_prefix(mut self, tokens: Vec<u32>) -> Self {
        self.prefix = (!tokens.is_empty()).then_some(Prefix { tokens, cache: None });
        self
    }

    /// The caller's RNG (to checkpoint its state).
    pub fn rng(&self) -> &R {
        &self.rng
    }

    /// Give the RNG back to the caller, which owns and checkpoints it.
    pub fn into_rng(self) -> R {
        self.rng
    }

    pub fn stats(&self) -> PolicyStats {
        self.stats
    }

    fn err(&self, e: impl std::fmt::Display) -> PolicyError {
        PolicyError { policy: "model".into(), message: e.to_string() }
    }

    /// KV slots of the parked caches of episodes not in `except`, each
    /// shared cache counted once.
    fn parked_slots(&self, except: &[TurnRequest<'_>]) -> usize {
        let mut seen: Vec<*const KvCache> = Vec::new();
        let mut total = 0;
        for (episode, p) in &self.parked {
            let ptr = Arc::as_ptr(&p.cache);
            if except.iter().any(|r| r.episode == *episode) || seen.contains(&ptr) {
                continue;
            }
            // Held by an episode of `except` too: still counted (it stays).
            seen.push(ptr);
            total += p.cache.slots();
        }
        // The prefix's cache is held whether episodes share it or not.
        if let Some(c) = self.prefix.as_ref().and_then(|p| p.cache.as_ref()) {
            if !seen.contains(&Arc::as_ptr(c)) {
                total += c.slots();
            }
        }
        total
    }

    /// KV slots a decode batch of `reqs` may hold.
    fn batch_slots(reqs: &[TurnRequest<'_>]) -> usize {
        batch_kv_slots(&reqs.iter().map(|r| (r.tokens.len(), r.max_new_tokens.max(1))).collect::<Vec<_>>())
    }

    /// Whether `reqs` as one decode batch fits both bounds.
    fn fits(&self, reqs: &[TurnRequest<'_>]) -> bool {
        let batch: usize = reqs.iter().map(|r| r.tokens.len() + r.max_new_tokens).sum();
        let kv_ok = self.limits.max_kv_tokens.is_none_or(|max| self.parked_slots(reqs) + Self::batch_slots(reqs) <= max);
        (reqs.len() == 1 || batch <= self.limits.max_batch_tokens) && kv_ok
    }

    /// Drop parked caches of episodes not in `keep`, the latest requested
    /// first, until `keep` fits the KV budget; an error when even alone it
    /// does not.
    fn evict_for(&mut self, keep: &[TurnRequest<'_>], order: &[TurnRequest<'_>]) -> crate::Result<()> {
        if self.fits(keep) {
            return Ok(());
        }
        // Candidates: this call's later requests, latest first, then any other
        // parked episode in id order (a HashMap's order would make the
        // evictions, hence the prefill paths, differ from run to run).
        let mut rest: Vec<u64> = self.parked.keys().copied().filter(|e| !order.iter().any(|r| r.episode == *e)).collect();
        rest.sort_unstable();
        let candidates: Vec<u64> = order.iter().rev().map(|r| r.episode).chain(rest).filter(|e| !keep.iter().any(|k| k.episode == *e)).collect();
        for e in candidates {
            if self.fits(keep) {
                return Ok(());
            }
            if self.parked.remove(&e).is_some() {
                self.stats.evictions += 1;
            }
        }
        if self.fits(keep) {
            return Ok(());
        }
        Err(crate::Error::invalid(
            "[rollout] max_kv_tokens",
            format!(
                "{} KV slots cannot hold one episode's turn ({} tokens + {} new need {}); raise it to at least 2 x [episode] max_total_tokens",
                self.limits.max_kv_tokens.unwrap_or(0),
                keep[0].tokens.len(),
                keep[0].max_new_tokens,
                Self::batch_slots(keep)
            ),
        ))
    }

    /// Generate one turn for a decode batch of requests that fits the
    /// limits, each episode drawing from its own stream of `streams`.
    fn batch(&mut self, reqs: &[TurnRequest<'_>], streams: Option<DrawStreams>) -> crate::Result<Vec<Generation>> {
        self.stats.batches += 1;
        self.stats.peak_kv_slots = self.stats.peak_kv_slots.max(self.parked_slots(reqs) + Self::batch_slots(reqs));
        let t0 = std::time::Instant::now();
        let prefilled = self.stats.prefill_tokens;
        prefill::bring_up_to_date(self, reqs)?;
        let t_prefill = t0.elapsed();
        // Every row's cache now holds all its tokens but the last: stack
        // them (the parked copies are dropped as they are copied) with room
        // for the last token and the new ones, then feed the last tokens.
        let room = reqs.iter().map(|r| r.max_new_tokens.max(1)).max().unwrap_or(1);
        let parts: Vec<Arc<KvCache>> = reqs
            .iter()
            .map(|r| self.parked.remove(&r.episode).map(|p| p.cache).expect("prefill parks every requested episode"))
            .collect();
        let mut cache = KvCache::stack_with_room(&parts.iter().map(|p| p.as_ref()).collect::<Vec<_>>(), room)?;
        drop(parts);
        let device = self.model.device().clone();
        let last_tokens: Vec<u32> = reqs.iter().map(|r| *r.tokens.last().expect("requests carry tokens")).collect();
        let last_pos: Vec<i64> = reqs.iter().map(|r| r.tokens.len() as i64 - 1).collect();
        let tokens = Tensor::from_vec(last_tokens, (reqs.len(), 1), &device)?;
        let hidden = self.model.forward(&tokens, &Positions::step(last_pos), Some(&mut cache))?;
        let last = hidden.i((.., 0, ..))?;
        let mut out: Vec<Generation> = reqs.iter().map(|_| Generation { ids: vec![], logprobs: vec![] }).collect();
        let next_pos: Vec<i64> = reqs.iter().map(|r| r.tokens.len() as i64).collect();
        let budgets: Vec<usize> = reqs.iter().map(|r| r.max_new_tokens.max(1)).collect();
        let episodes: Vec<u64> = reqs.iter().map(|r| r.episode).collect();
        let draws = Draws { streams, keys: &episodes };
        let interrupt = self.interrupt.clone();
        let cancelled = || interrupt.as_ref().is_some_and(|f| f.load(Ordering::Relaxed));
        let step = DecodeStep { sampler: &self.sampler, stop_tokens: &self.stop_tokens, budgets: &budgets, draws, cancelled: &cancelled };
        if let [r] = reqs {
            // One row (a single localize attempt, an eval's last episode):
            // drafts from its own tokens, the same episode bit for bit.
            let lookup = lm::lookup::decode_lookup(self.model, &mut cache, &last, next_pos[0], &step, r.tokens, &mut out[0])?;
            self.stats.drafted += lookup.drafted;
            self.stats.accepted += lookup.accepted;
            let seen = r.tokens.len() + out[0].ids.len() - 1;
            self.parked.insert(r.episode, Parked { cache: Arc::new(cache.extract_row(0)?), seen });
            tracing::debug!(prefill_tokens = self.stats.prefill_tokens - prefilled, prefill_secs = t_prefill.as_secs_f64(), decoded = out[0].ids.len(), forwards = lookup.forwards, accepted = lookup.accepted, drafted = lookup.drafted, decode_secs = (t0.elapsed() - t_prefill).as_secs_f64(), "one-row turn");
            return Ok(out);
        }
        let parked = &mut self.parked;
        decode(self.model, &mut cache, last, next_pos, &step, &mut out, |i, row, cache, generated| {
            // The last sampled token is not in the cache yet.
            let seen = reqs[i].tokens.len() + generated.ids.len() - 1;
            parked.insert(reqs[i].episode, Parked { cache: Arc::new(cache.extract_row(row)?), seen });
            Ok(())
        })?;
        let decoded: usize = out.iter().map(|g| g.ids.len()).sum();
        tracing::debug!(rows = reqs.len(), prefill_tokens = self.stats.prefill_tokens - prefilled, prefill_secs = t_prefill.as_secs_f64(), decoded, decode_secs = (t0.elapsed() - t_prefill).as_secs_f64(), "turn batch");
        Ok(out)
    }
}

impl<R: Rng> Policy for ModelPolicy<'_, R> {
    fn name(&self) -> String {
        "model".into()
    }

    /// One seed per call (none when greedy), shared by every decode batch:
    /// an episode's draws depend on the seed, the episode and the token's
    /// position only, whatever the limits make of the batches.
    fn next_turns(&mut self, requests: &[TurnRequest<'_>]) -> Result<Vec<TurnOutput>, PolicyError> {
        if let Some(r) = requests.iter().find(|r| r.tokens.is_empty()) {
            return Err(self.err(format!("episode {} asks for a turn with no tokens", r.episode)));
        }
        let streams = DrawStreams::for_sampler(&self.sampler, &mut self.rng);
        self.draws += u64::from(streams.is_some());
        let mut outputs = Vec::with_capacity(requests.len());
        let mut start = 0;
        while start < requests.len() {
            self.evict_for(&requests[start..start + 1], &requests[start..]).map_err(|e| self.err(e))?;
            let mut end = start + 1;
            while end < requests.len() && self.fits(&requests[start..end + 1]) {
                end += 1;
            }
            let gens = self.batch(&requests[start..end], streams).map_err(|e| self.err(e))?;
            outputs.extend(gens.into_iter().map(|g| TurnOutput::Tokens { ids: g.ids, logprobs: g.logprobs }));
            start = end;
        }
        Ok(outputs)
    }

    fn finish(&mut self, episode: u64) {
        self.parked.remove(&episode);
    }

    fn draws(&self) -> u64 {
        self.draws
    }

    fn skip_draws(&mut self, n: u64) {
        for _ in 0..n {
            self.draws += u64::from(DrawStreams::for_sampler(&self.sampler, &mut self.rng).is_some());
        }
    }

    fn interrupt_on(&mut self, flag: Option<Arc<AtomicBool>>) {
        self.interrupt = flag;
    }

    fn set_temperature(&mut self, temperature: f64) -> bool {
        self.sampler.temperature = temperature;
        true
    }

    fn max_live(&self) -> Option<usize> {
        self.limits.max_live
    }
}
