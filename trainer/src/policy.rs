//! Our model as a rollout [`Policy`]: every live episode's turn is generated
//! in one batch with the KV cache. Between turns each episode's cache is
//! parked as a compact single-row cache; at the next turn the parked caches
//! are stacked (left-padded with invisible slots), only the new tokens (tool
//! responses + assistant header) are prefilled, and decoding proceeds one
//! token per step. A row that ends its turn leaves the batch at once.
//! A token budget bounds the batch: requests are split into chunks whose
//! total tokens (sequence + new-token budget) stay under it. Each episode
//! samples from its own random stream (seeded once per `next_turns` call
//! from the caller's RNG), so chunking never changes what it draws.

use crate::generate::{decode, DecodeStep, Draws, Generation};
use crate::model::cache::{KvCache, Positions};
use crate::model::Qwen3;
use crate::sampling::{DrawStreams, SamplerConfig};
use candle_core::{IndexOp, Tensor};
use rand::Rng;
use rollout::policy::{Policy, PolicyError, TurnOutput, TurnRequest};
use std::collections::HashMap;

/// A parked episode: its cache and how many of its tokens the cache holds.
struct Parked {
    cache: KvCache,
    seen: usize,
}

/// Qwen3 generating assistant turns.
pub struct ModelPolicy<'m, R: Rng> {
    model: &'m Qwen3,
    sampler: SamplerConfig,
    rng: R,
    stop_tokens: Vec<u32>,
    max_batch_tokens: usize,
    parked: HashMap<u64, Parked>,
}

impl<'m, R: Rng> ModelPolicy<'m, R> {
    /// `stop_tokens` end a turn (Qwen3: `<|im_end|>`, `<|endoftext|>`);
    /// `max_batch_tokens` bounds rows x (tokens + new tokens) per batch.
    pub fn new(model: &'m Qwen3, sampler: SamplerConfig, rng: R, stop_tokens: Vec<u32>, max_batch_tokens: usize) -> Self {
        ModelPolicy { model, sampler, rng, stop_tokens, max_batch_tokens: max_batch_tokens.max(1), parked: HashMap::new() }
    }

    /// The caller's RNG (to checkpoint its state).
    pub fn rng(&self) -> &R {
        &self.rng
    }

    /// Give the RNG back to the caller, which owns and checkpoints it.
    pub fn into_rng(self) -> R {
        self.rng
    }

    fn err(&self, e: impl std::fmt::Display) -> PolicyError {
        PolicyError { policy: self.name(), message: e.to_string() }
    }

    /// Generate one turn for a chunk of requests that fits the budget,
    /// each episode drawing from its own stream of `streams`.
    fn chunk(&mut self, reqs: &[TurnRequest<'_>], streams: Option<DrawStreams>) -> crate::Result<Vec<Generation>> {
        let layers = self.model.config().num_hidden_layers;
        // Each row: its parked cache (or an empty one) and its unseen tokens.
        let mut caches = Vec::with_capacity(reqs.len());
        let mut deltas: Vec<(usize, &[u32])> = Vec::with_capacity(reqs.len());
        for r in reqs {
            match self.parked.remove(&r.episode) {
                Some(p) if p.seen < r.tokens.len() => {
                    deltas.push((p.seen, &r.tokens[p.seen..]));
                    caches.push(Some(p.cache));
                }
                _ => {
                    deltas.push((0, r.tokens));
                    caches.push(None);
                }
            }
        }
        let mut cache = if caches.iter().all(Option::is_some) {
            KvCache::stack(&caches.into_iter().map(|c| c.expect("checked")).collect::<Vec<_>>())?
        } else {
            // Rows without a parked cache restart from their first token.
            deltas = reqs.iter().map(|r| (0, r.tokens)).collect();
            KvCache::new(layers, reqs.len())
        };
        let width = deltas.iter().map(|(_, d)| d.len()).max().unwrap_or(0);
        let (mut toks, mut pos) = (Vec::with_capacity(reqs.len() * width), Vec::with_capacity(reqs.len() * width));
        for (start, d) in &deltas {
            let pad = width - d.len();
            toks.extend(std::iter::repeat_n(0u32, pad).chain(d.iter().copied()));
            pos.extend(std::iter::repeat_n(-1i64, pad).chain((0..d.len()).map(|j| (start + j) as i64)));
        }
        let device = self.model.device().clone();
        let tokens = Tensor::from_vec(toks, (reqs.len(), width), &device)?;
        let positions = Positions { batch: reqs.len(), len: width, data: pos, segments: None };
        let hidden = self.model.forward(&tokens, &positions, Some(&mut cache))?;
        let last = hidden.i((.., width - 1, ..))?;
        let mut out: Vec<Generation> = reqs.iter().map(|_| Generation { ids: vec![], logprobs: vec![] }).collect();
        let next_pos: Vec<i64> = reqs.iter().map(|r| r.tokens.len() as i64).collect();
        let budgets: Vec<usize> = reqs.iter().map(|r| r.max_new_tokens.max(1)).collect();
        let episodes: Vec<u64> = reqs.iter().map(|r| r.episode).collect();
        let draws = Draws { streams, keys: &episodes };
        let step = DecodeStep { sampler: &self.sampler, stop_tokens: &self.stop_tokens, budgets: &budgets, draws };
        let parked = &mut self.parked;
        decode(self.model, &mut cache, last, next_pos, &step, &mut out, |i, row, cache, generated| {
            // The last sampled token is not in the cache yet.
            let seen = reqs[i].tokens.len() + generated.ids.len() - 1;
            parked.insert(reqs[i].episode, Parked { cache: cache.extract_row(row)?, seen });
            Ok(())
        })?;
        Ok(out)
    }
}

impl<R: Rng> Policy for ModelPolicy<'_, R> {
    fn name(&self) -> String {
        "model".into()
    }

    /// One seed per call (none when greedy), shared by every chunk: an
    /// episode's draws depend on the seed, the episode and the token's
    /// position only, whatever the budget makes of the chunks.
    fn next_turns(&mut self, requests: &[TurnRequest<'_>]) -> Result<Vec<TurnOutput>, PolicyError> {
        let streams = DrawStreams::for_sampler(&self.sampler, &mut self.rng);
        let mut outputs = Vec::with_capacity(requests.len());
        let mut start = 0;
        while start < requests.len() {
            let mut end = start;
            let mut budget = 0;
            while end < requests.len() {
                let cost = requests[end].tokens.len() + requests[end].max_new_tokens;
                if end > start && budget + cost > self.max_batch_tokens {
                    break;
                }
                budget += cost;
                end += 1;
            }
            let gens = self.chunk(&requests[start..end], streams).map_err(|e| self.err(e))?;
            outputs.extend(gens.into_iter().map(|g| TurnOutput::Tokens { ids: g.ids, logprobs: g.logprobs }));
            start = end;
        }
        Ok(outputs)
    }

    fn finish(&mut self, episode: u64) {
        self.parked.remove(&episode);
    }
}
