//! Batched generation with the KV cache: prompts are left-padded into one
//! batch (padding positions are -1), prefilled once, then decoded one token
//! per step for every live row. A row that emits a stop token or reaches its
//! budget is done: it rides along as padding (invisible to every row) until
//! half the batch is done, then the cache is compacted to the live rows, so
//! nothing waits on the slowest row more than it must and the cache is not
//! copied once per finished row. Each step samples on the logits' device
//! (`kernels::sampling`); only the live rows' tokens and log-probs reach the
//! host. A row's draws come from its own stream ([`DrawStreams`]): the
//! prompt's index in [`generate`], the episode in the policy.

use crate::error::{Error, Result};
use crate::model::cache::{KvCache, Positions};
use crate::model::CausalLm;
use crate::sampling::{DrawStreams, SamplerConfig};
use candle_core::{IndexOp, Tensor};
use kernels::sampling::{sample, Pick};
use rand::Rng;

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateConfig {
    pub max_new_tokens: usize,
    pub sampler: SamplerConfig,
    /// Generation of a row ends after it emits one of these (kept in output).
    pub stop_tokens: Vec<u32>,
}

/// New tokens of one row and their sampling log-probs.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    pub ids: Vec<u32>,
    pub logprobs: Vec<f32>,
}

/// Continue every prompt; results are in prompt order. Sampling draws one
/// seed from `rng` (greedy draws none); prompt `i` samples from stream `i`.
pub fn generate<R: Rng>(model: &CausalLm, prompts: &[Vec<u32>], cfg: &GenerateConfig, rng: &mut R) -> Result<Vec<Generation>> {
    generate_each(model, prompts, cfg, rng, |_, _| Ok(()))
}

/// [`generate`], with `on_done(prompt_index, generation)` called as each
/// row finishes (stop token or budget), before the others do.
pub fn generate_each<R: Rng>(
    model: &CausalLm,
    prompts: &[Vec<u32>],
    cfg: &GenerateConfig,
    rng: &mut R,
    on_done: impl FnMut(usize, &Generation) -> Result<()>,
) -> Result<Vec<Generation>> {
    generate_inner(model, prompts, cfg, rng, &|| false, on_done)
}

/// [`generate`] that stops before the next decode step once `cancelled()`
/// says so (`serve`'s client hung up), with [`Error::Cancelled`].
pub fn generate_until<R: Rng>(
    model: &CausalLm,
    prompts: &[Vec<u32>],
    cfg: &GenerateConfig,
    rng: &mut R,
    cancelled: &dyn Fn() -> bool,
) -> Result<Vec<Generation>> {
    generate_inner(model, prompts, cfg, rng, cancelled, |_, _| Ok(()))
}

fn generate_inner<R: Rng>(
    model: &CausalLm,
    prompts: &[Vec<u32>],
    cfg: &GenerateConfig,
    rng: &mut R,
    cancelled: &dyn Fn() -> bool,
    mut on_done: impl FnMut(usize, &Generation) -> Result<()>,
) -> Result<Vec<Generation>> {
    if let Some(i) = prompts.iter().position(Vec::is_empty) {
        return Err(Error::invalid("generate", format!("prompt {i} is empty")));
    }
    let mut out: Vec<Generation> = prompts.iter().map(|_| Generation { ids: vec![], logprobs: vec![] }).collect();
    if prompts.is_empty() || cfg.max_new_tokens == 0 {
        return Ok(out);
    }
    let device = model.device().clone();
    let width = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let (mut tok_rows, mut pos_rows) = (Vec::new(), Vec::new());
    for p in prompts {
        let pad = width - p.len();
        tok_rows.extend(std::iter::repeat_n(0u32, pad).chain(p.iter().copied()));
        pos_rows.push((0..width).map(|j| j as i64 - pad as i64).map(|x| if x < 0 { -1 } else { x }).collect::<Vec<_>>());
    }
    let mut cache = KvCache::new(model.config().num_hidden_layers, prompts.len());
    let tokens = Tensor::from_vec(tok_rows, (prompts.len(), width), &device)?;
    let hidden = model.forward(&tokens, &Positions::from_rows(&pos_rows)?, Some(&mut cache))?;
    let last = hidden.i((.., width - 1, ..))?;
    let budgets = vec![cfg.max_new_tokens; prompts.len()];
    let next_pos: Vec<i64> = prompts.iter().map(|p| p.len() as i64).collect();
    let streams = (0..prompts.len() as u64).collect::<Vec<_>>();
    let draws = Draws { streams: DrawStreams::for_sampler(&cfg.sampler, rng), keys: &streams };
    let step = DecodeStep { sampler: &cfg.sampler, stop_tokens: &cfg.stop_tokens, budgets: &budgets, draws, cancelled };
    decode(model, &mut cache, last, next_pos, &step, &mut out, |i, _, _, g| on_done(i, g))?;
    Ok(out)
}

/// How each row of a decode picks and stops.
pub struct DecodeStep<'a> {
    pub sampler: &'a SamplerConfig,
    pub stop_tokens: &'a [u32],
    /// New-token budget of each row (indexed like `out`).
    pub budgets: &'a [usize],
    pub draws: Draws<'a>,
    /// Checked before each step: true stops the decode with [`Error::Cancelled`].
    pub cancelled: &'a dyn Fn() -> bool,
}

/// Where each row's uniforms come from: its stream (indexed like `out`)
/// of the step's [`DrawStreams`], at the position of the token drawn.
/// `streams` is `None` when greedy (no draws).
pub struct Draws<'a> {
    pub streams: Option<DrawStreams>,
    pub keys: &'a [u64],
}

impl Draws<'_> {
    pub(crate) fn uniform(&self, row: usize, position: i64) -> f64 {
        self.streams.map_or(0.0, |s| s.uniform(self.keys[row], position as u64))
    }
}

/// Decode one token per step for every row of `cache` until each row emits a
/// stop token or spends its budget. `last` holds each row's last hidden state
/// and `next_pos` its next position; tokens and log-probs go to `out[row]`.
/// When a row finishes, `on_done(row, batch_row, &cache, &out[row])` may
/// take what it needs from the cache (its last sampled token is not in it);
/// the row then only pads until the next compaction.
pub fn decode(
    model: &CausalLm,
    cache: &mut KvCache,
    mut last: Tensor,
    mut next_pos: Vec<i64>,
    step: &DecodeStep<'_>,
    out: &mut [Generation],
    mut on_done: impl FnMut(usize, usize, &KvCache, &Generation) -> Result<()>,
) -> Result<()> {
    let device = model.device().clone();
    // rows[b] = index into `out` of batch row b, None once that row is done.
    let mut rows: Vec<Option<usize>> = (0..out.len()).map(Some).collect();
    loop {
        if (step.cancelled)() {
            return Err(Error::Cancelled { tokens: out.iter().map(|g| g.ids.len()).sum() });
        }
        let live: Vec<usize> = (0..rows.len()).filter(|&b| rows[b].is_some()).collect();
        let mut picks = sample_live(model, &last, &live, step, |b| (rows[b].expect("live"), next_pos[b]))?.into_iter();
        let mut fed = Vec::with_capacity(rows.len());
        for b in 0..rows.len() {
            let Some(i) = rows[b] else {
                fed.push(0);
                continue;
            };
            let s = picks.next().expect("one pick per live row");
            out[i].ids.push(s.token);
            out[i].logprobs.push(s.logprob);
            if out[i].ids.len() >= step.budgets[i] || step.stop_tokens.contains(&s.token) {
                on_done(i, b, cache, &out[i])?;
                rows[b] = None;
                fed.push(0);
            } else {
                fed.push(s.token);
            }
        }
        let done = rows.iter().filter(|r| r.is_none()).count();
        if done == rows.len() {
            return Ok(());
        }
        // Done rows ride along as padding (position -1: no other row sees
        // them) until half the batch is done; then the cache is compacted.
        // Compacting at every finished row copied the whole cache once per
        // row, quadratic in the batch size.
        if 2 * done >= rows.len() {
            let keep: Vec<usize> = (0..rows.len()).filter(|&b| rows[b].is_some()).collect();
            cache.retain_rows(&keep)?;
            fed = keep.iter().map(|&b| fed[b]).collect();
            next_pos = keep.iter().map(|&b| next_pos[b]).collect();
            rows = keep.iter().map(|&b| rows[b]).collect();
        }
        let positions: Vec<i64> = rows.iter().zip(&next_pos).map(|(r, &p)| if r.is_some() { p } else { -1 }).collect();
        let tokens = Tensor::from_vec(fed, (rows.len(), 1), &device)?;
        last = model.forward(&tokens, &Positions::step(positions), Some(cache))?.squeeze(1)?;
        next_pos.iter_mut().for_each(|p| *p += 1);
    }
}

/// The tokens of the `live` batch rows of `last`: their logits only, sampled
/// on the device, each with the uniform of `(out index, position)` from
/// `at(batch row)`.
fn sample_live(model: &CausalLm, last: &Tensor, live: &[usize], step: &DecodeStep<'_>, at: impl Fn(usize) -> (usize, i64)) -> Result<Vec<Pick>> {
    let hidden = if live.len() == last.dim(0)? {
        last.clone()
    } else {
        let idx = Tensor::from_vec(live.iter().map(|&b| b as u32).collect::<Vec<_>>(), live.len(), last.device())?;
        last.index_select(&idx, 0)?
    };
    let uniforms: Vec<f64> = live.iter().map(|&b| at(b)).map(|(i, pos)| step.draws.uniform(i, pos)).collect();
    Ok(sample(&model.logits(&hidden)?, &uniforms, step.sampler.mode())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ModelConfig;
    use candle_core::{DType, Device};
    use rand::SeedableRng;

    fn tiny() -> CausalLm {
        let cfg = ModelConfig::new_tiny(300, 32, 64, 2, 4, 2, 8, true);
        let w = crate::init::random_weights(&cfg, 3, DType::F32, &Device::Cpu).unwrap();
        let w = w.into_iter().map(|(k, t)| if k.ends_with("norm.weight") { (k, t) } else { (k, (t * 8.0).unwrap()) }).collect();
        CausalLm::new(&cfg, &w).unwrap()
    }

    /// A prompt's sampled continuation is the same alone or batched with
    /// others (its stream is its index, the seed one draw of the caller's
    /// RNG), and greedy generation draws nothing from the RNG.
    #[test]
    fn sampled_rows_do_not_depend_on_their_batch() {
        let model = tiny();
        let prompts: Vec<Vec<u32>> = vec![vec![5, 6, 7], vec![9; 11], vec![1, 2]];
        let cfg = GenerateConfig { max_new_tokens: 12, sampler: SamplerConfig { temperature: 1.0, top_p: 1.0, top_k: 0 }, stop_tokens: vec![] };
        let run = |ps: &[Vec<u32>]| generate(&model, ps, &cfg, &mut rand_chacha::ChaCha8Rng::seed_from_u64(4)).unwrap();
        let (all, alone) = (run(&prompts), run(&prompts[..1]));
        assert_eq!(all[0].ids, alone[0].ids);
        let worst = all[0].logprobs.iter().zip(&alone[0].logprobs).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        println!("batched vs alone: same {} tokens, max |logprob diff| {worst:.2e}", alone[0].ids.len());
        assert!(worst <= 1e-5);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        let greedy = GenerateConfig { sampler: SamplerConfig::default(), ..cfg.clone() };
        generate(&model, &prompts, &greedy, &mut rng).unwrap();
        assert_eq!(rng.random::<u64>(), rand_chacha::ChaCha8Rng::seed_from_u64(4).random::<u64>(), "greedy draws nothing");
    }

    /// A generation whose caller gives up stops before the next decode
    /// step, saying how many tokens it had made (serve's client hung up).
    #[test]
    fn a_cancelled_generation_stops_at_the_next_step() {
        let model = tiny();
        let prompts: Vec<Vec<u32>> = vec![vec![5, 6, 7], vec![9; 11]];
        let cfg = GenerateConfig { max_new_tokens: 40, sampler: SamplerConfig::default(), stop_tokens: vec![] };
        let checks = std::cell::Cell::new(0);
        let cancelled = || {
            checks.set(checks.get() + 1);
            checks.get() > 3
        };
        let r = generate_until(&model, &prompts, &cfg, &mut rand_chacha::ChaCha8Rng::seed_from_u64(4), &cancelled);
        assert!(matches!(r, Err(Error::Cancelled { tokens: 6 })), "{r:?}");
        assert_eq!(checks.get(), 4, "no step after the cancel");
        let whole = generate_until(&model, &prompts, &cfg, &mut rand_chacha::ChaCha8Rng::seed_from_u64(4), &|| false).unwrap();
        assert!(whole.iter().all(|g| g.ids.len() == 40));
    }
}
