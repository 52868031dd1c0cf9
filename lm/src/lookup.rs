//! Decoding one sequence with drafts looked up in its own tokens ("prompt
//! lookup"): when the last few tokens occurred before (a path the tools
//! printed, the shape of a tool call), the tokens that followed are
//! proposed, and one forward pass over the last token and the draft checks
//! them all: a decoding step of a small model on a CPU reads every weight
//! once however few rows it multiplies, so checking 8 tokens costs little
//! more than making 1.
//!
//! The episode is the one plain [`crate::generate::decode`] makes, token
//! for token and log-prob for log-prob, bit for bit: each drawn token is
//! the pick of its own logits with the uniform of its own position, and
//! those logits are the same bits as a one-token step's
//! ([`CausalLm::forward_steps`]: the few-rows product `kernels::linear`
//! gives every row the same dot products in the same order however many
//! rows it multiplies, each query attends alone as in a step, and norms,
//! rotary tables and sampling are per row). Drafted tokens the model does
//! not pick are cut from the cache ([`KvCache::truncate`]).

use crate::error::{Error, Result};
use crate::generate::{DecodeStep, Generation};
use crate::model::cache::{KvCache, Positions};
use crate::model::CausalLm;
use candle_core::Tensor;
use kernels::sampling::{sample, Pick};

/// Tokens a draft proposes at most.
pub const MAX_DRAFT: usize = 8;
/// Tokens at the end of the sequence a draft must match, longest first.
const NGRAMS: [usize; 2] = [3, 2];

/// What a lookup decode did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LookupStats {
    /// Forward passes of the model (each checks a draft or makes one token).
    pub forwards: usize,
    /// Tokens proposed by drafts.
    pub drafted: usize,
    /// Drafted tokens the model picked too (each saves a forward pass).
    pub accepted: usize,
}

/// The tokens that followed the latest earlier occurrence of the last
/// 3 (else 2) tokens of `seq`, at most `max`; empty when none occurred.
pub fn lookup_draft(seq: &[u32], max: usize) -> Vec<u32> {
    if max == 0 {
        return Vec::new();
    }
    for n in NGRAMS {
        if seq.len() <= n {
            continue;
        }
        let tail = &seq[seq.len() - n..];
        // Latest first: the freshest context (this turn's tool output) is
        // the likeliest to be copied.
        if let Some(start) = (0..seq.len() - n).rev().find(|&i| &seq[i..i + n] == tail) {
            let from = start + n;
            return seq[from..(from + max).min(seq.len())].to_vec();
        }
    }
    Vec::new()
}

/// Decode the one row of `cache` as [`crate::generate::decode`] would, with
/// drafts from [`lookup_draft`] over `context` (the row's tokens so far)
/// and what it generates. `last` is the hidden state `[1, hidden]` of the
/// row's last token (not in the cache), `next_pos` the position of the
/// first token drawn. On return the cache holds every token but the last
/// one generated, as `decode` leaves a finished row.
pub fn decode_lookup(
    model: &CausalLm,
    cache: &mut KvCache,
    last: &Tensor,
    next_pos: i64,
    step: &DecodeStep<'_>,
    context: &[u32],
    out: &mut Generation,
) -> Result<LookupStats> {
    decode_drafted(model, cache, last, next_pos, step, out, &mut |generated: &[u32], max| {
        let seq: Vec<u32> = context.iter().chain(generated).copied().collect();
        lookup_draft(&seq, max)
    })
}

/// [`decode_lookup`] with drafts from `draft(generated, max)` (tests give
/// right and wrong ones).
#[allow(clippy::too_many_arguments)]
pub fn decode_drafted(
    model: &CausalLm,
    cache: &mut KvCache,
    last: &Tensor,
    next_pos: i64,
    step: &DecodeStep<'_>,
    out: &mut Generation,
    draft: &mut dyn FnMut(&[u32], usize) -> Vec<u32>,
) -> Result<LookupStats> {
    if cache.batch() != 1 || step.budgets.len() != 1 {
        return Err(Error::invalid("decode_lookup", format!("one row, not {} (budgets {})", cache.batch(), step.budgets.len())));
    }
    let budget = step.budgets[0];
    let device = model.device().clone();
    let mut stats = LookupStats::default();
    // The token drawn at `pos`; the cache holds every token before it.
    let mut pos = next_pos;
    let mut pick = picks(model, last, step, pos)?[0];
    loop {
        if done(out, pick, step, budget) {
            return Ok(stats);
        }
        if (step.cancelled)() {
            return Err(Error::Cancelled { tokens: out.ids.len() });
        }
        // Every fed token's successor may be drawn: no more than the budget allows.
        let proposal = draft(&out.ids, MAX_DRAFT.min(budget - out.ids.len() - 1));
        let fed: Vec<u32> = std::iter::once(pick.token).chain(proposal.iter().copied()).collect();
        let n = fed.len();
        let base = cache.slots();
        let tokens = Tensor::from_vec(fed, (1, n), &device)?;
        let positions = Positions { batch: 1, len: n, data: (pos..pos + n as i64).collect(), segments: None };
        let hidden = model.forward_steps(&tokens, &positions, cache)?.squeeze(0)?;
        stats.forwards += 1;
        stats.drafted += proposal.len();
        let next = picks(model, &hidden, step, pos + 1)?;
        let mut i = 0;
        while i < proposal.len() && next[i].token == proposal[i] {
            stats.accepted += 1;
            if done(out, next[i], step, budget) {
                cache.truncate(base + i + 1);
                return Ok(stats);
            }
            i += 1;
        }
        // Kept: the fed tokens up to the one whose successor differs from the draft.
        cache.truncate(base + i + 1);
        pos += i as i64 + 1;
        pick = next[i];
    }
}

/// Appends `pick` to `out`; whether the row is done (a stop token, or the budget spent).
fn done(out: &mut Generation, pick: Pick, step: &DecodeStep<'_>, budget: usize) -> bool {
    out.ids.push(pick.token);
    out.logprobs.push(pick.logprob);
    out.ids.len() >= budget || step.stop_tokens.contains(&pick.token)
}

/// The picks of the rows of `hidden` (`[n, hidden]`), row `i` drawing the
/// token at position `first + i`.
fn picks(model: &CausalLm, hidden: &Tensor, step: &DecodeStep<'_>, first: i64) -> Result<Vec<Pick>> {
    let rows = hidden.dim(0)?;
    let uniforms: Vec<f64> = (0..rows as i64).map(|i| step.draws.uniform(0, first + i)).collect();
    Ok(sample(&model.logits(hidden)?, &uniforms, step.sampler.mode())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::{decode, Draws};
    use crate::sampling::{DrawStreams, SamplerConfig};
    use crate::ModelConfig;
    use candle_core::{DType, Device, IndexOp};
    use rand::SeedableRng;

    fn tiny() -> CausalLm {
        let cfg = ModelConfig::new_tiny(300, 32, 64, 2, 4, 2, 8, true);
        let w = crate::init::random_weights(&cfg, 3, DType::F32, &Device::Cpu).unwrap();
        let w = w.into_iter().map(|(k, t)| if k.ends_with("norm.weight") { (k, t) } else { (k, (t * 8.0).unwrap()) }).collect();
        CausalLm::new(&cfg, &w).unwrap()
    }

    /// The prompt but its last token in a cache, and that token's hidden state.
    fn prefilled(model: &CausalLm, prompt: &[u32]) -> (KvCache, Tensor) {
        let mut cache = KvCache::new(model.config().num_hidden_layers, 1);
        let n = prompt.len();
        let tokens = Tensor::from_vec(prompt.to_vec(), (1, n), &Device::Cpu).unwrap();
        let hidden = model.forward(&tokens, &Positions::sequential(1, n), Some(&mut cache)).unwrap();
        (cache, hidden.i((.., n - 1, ..)).unwrap())
    }

    fn bits(g: &Generation) -> (Vec<u32>, Vec<u32>) {
        (g.ids.clone(), g.logprobs.iter().map(|x| x.to_bits()).collect())
    }

    /// Whatever the drafts (all right, all wrong, right then wrong, looked
    /// up, a stop token inside a draft), the tokens and log-probs are those
    /// of plain decoding, bit for bit, greedy and sampled; right drafts
    /// save forward passes; the cache ends as plain decoding leaves it.
    #[test]
    fn drafts_change_no_bit_of_the_generation() {
        let model = tiny();
        let prompt: Vec<u32> = (0..40).map(|i| (i * 37 % 23 + 5) as u32).collect();
        let budget = 30;
        for (sampler, seed) in [(SamplerConfig::default(), 0u64), (SamplerConfig { temperature: 1.0, top_p: 1.0, top_k: 0 }, 5)] {
            let streams = DrawStreams::for_sampler(&sampler, &mut rand_chacha::ChaCha8Rng::seed_from_u64(seed));
            let (keys, budgets) = ([7u64], [budget]);
            let never = || false;
            let step = |stop: &'static [u32]| DecodeStep { sampler: &sampler, stop_tokens: stop, budgets: &budgets, draws: Draws { streams, keys: &keys }, cancelled: &never };
            let plain = |stop: &'static [u32]| {
                let (mut cache, last) = prefilled(&model, &prompt);
                let mut out = vec![Generation { ids: vec![], logprobs: vec![] }];
                let mut slots = 0;
                decode(&model, &mut cache, last, vec![prompt.len() as i64], &step(stop), &mut out, |_, _, c, _| {
                    slots = c.slots();
                    Ok(())
                })
                .unwrap();
                (out.remove(0), slots)
            };
            let (want, want_slots) = plain(&[]);
            assert_eq!(want.ids.len(), budget);
            let truth = want.ids.clone();
            let drafted = |stop: &'static [u32], f: &mut dyn FnMut(&[u32], usize) -> Vec<u32>| {
                let (mut cache, last) = prefilled(&model, &prompt);
                let mut out = Generation { ids: vec![], logprobs: vec![] };
                let stats = decode_drafted(&model, &mut cache, &last, prompt.len() as i64, &step(stop), &mut out, f).unwrap();
                (out, stats, cache.slots())
            };
            let right = |g: &[u32], max: usize| truth[g.len()..].iter().take(max).copied().collect::<Vec<_>>();
            let wrong = |g: &[u32], max: usize| right(g, max).iter().map(|t| (t + 1) % 300).collect::<Vec<_>>();
            let half = |g: &[u32], max: usize| {
                let mut d = right(g, max);
                if d.len() > 2 {
                    d[2] = (d[2] + 1) % 300;
                }
                d
            };
            let ctx = prompt.clone();
            let looked_up = |g: &[u32], max: usize| lookup_draft(&[ctx.as_slice(), g].concat(), max);
            let cases: [(&str, Box<dyn FnMut(&[u32], usize) -> Vec<u32>>); 4] =
                [("right", Box::new(right)), ("wrong", Box::new(wrong)), ("half", Box::new(half)), ("lookup", Box::new(looked_up))];
            for (name, mut f) in cases {
                let (got, stats, slots) = drafted(&[], f.as_mut());
                println!("T = {} {name}: {stats:?}", sampler.temperature);
                assert_eq!(bits(&got), bits(&want), "T = {} {name}", sampler.temperature);
                assert_eq!(slots, want_slots, "{name}: the cache holds every token but the last");
                match name {
                    "right" => assert!(stats.forwards <= budget / (MAX_DRAFT + 1) + 1 && stats.accepted + stats.forwards + 1 == budget, "{stats:?}"),
                    "wrong" => assert_eq!((stats.forwards, stats.accepted), (budget - 1, 0)),
                    _ => {}
                }
            }
            // A stop token picked inside a draft ends the generation there.
            let stop: &'static [u32] = Box::leak(vec![truth[11]].into_boxed_slice());
            let (want_stop, want_slots) = plain(stop);
            let (got, _, slots) = drafted(stop, &mut |g: &[u32], max: usize| right(g, max));
            assert_eq!(bits(&got), bits(&want_stop));
            assert_eq!(slots, want_slots);
        }
    }

    #[test]
    fn a_draft_follows_the_latest_match_of_the_last_tokens() {
        let seq = [1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 4, 5, 1, 2, 3];
        assert_eq!(lookup_draft(&seq, 4), vec![7, 8, 4, 5]);
        assert_eq!(lookup_draft(&seq, 1), vec![7]);
        assert_eq!(lookup_draft(&[5, 6, 1, 5, 6], 3), vec![1, 5, 6], "two tokens matched when three are not");
        assert!(lookup_draft(&[1, 2, 3, 4], 3).is_empty());
        assert!(lookup_draft(&seq, 0).is_empty());
    }
}
