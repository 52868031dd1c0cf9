//! The data-parallel update against one process's, on the same episodes:
//! for each GRPO loss aggregation and for SFT, every rank computes its share
//! of the gradient and the update over the ranks, rank 0 then computes the
//! whole batch alone, and the two are compared (relative to the largest
//! magnitude of one process's). `fusegrpo dist-check` runs it under mpirun;
//! the tests run it with ranks as threads.

use trainer::dist::{Collective, Dist, Single};
use trainer::error::{Error, Result};
use trainer::grpo::advantages::TRL_ADVANTAGE_EPS;
use trainer::grpo::{group_advantages, LossAggregation};
use trainer::{grpo, sft};
use trainer::optim::Gradients;
use trainer::run_config::RunConfig;
use trainer::sft::SftBatch;
use lm::weights::TensorMap;
use lm::ModelConfig;
use candle_core::{DType, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rollout::episode::filter::SftExample;
use rollout::episode::{Episode, Phase, StopReason};
use rollout::reward::Score;
use std::sync::Arc;

/// The largest relative difference the check accepts (the 1e-6).
pub const TOLERANCE: f64 = 1e-6;

/// One compared case.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Case {
    /// `grpo`, `bnpo`, `dr_grpo`, `dapo`, `gspo` (sequence-level ratios,
    /// `grpo` aggregation), `sft`, `grpo_zero1` or `sft_zero1`.
    pub name: String,
    /// One process's gradient norm (0 would make the case vacuous).
    pub grad_norm: f64,
    /// The summed gradient: `||g_ranks - g_one|| / ||g_one||` (L2 over
    /// every parameter).
    pub grad_rel: f64,
    /// The same as the largest element difference over `max |g_one|`,
    /// reported: elements whose micro-batch terms cancel carry the rounding
    /// of their larger partial sums, so this reaches several f32 ulps.
    pub grad_max_rel: f64,
    /// The weights after the update: `||p_ranks - p_one|| / ||p_one||` (L2
    /// over every parameter).
    pub update_rel: f64,
    /// The update itself, `d = p_after - p_before`: `||d_ranks - d_one|| /
    /// ||d_one||` (L2 over every parameter), reported, not held to the
    /// tolerance: AdamW's first step is `g / (|g| + eps)`, which turns the
    /// gradient's rounding (the ranks add their shares in another order than
    /// one process adds its micro-batches) into up to `lr * delta_g / eps`
    /// where `|g|` is near `eps`.
    pub delta_rel: f64,
    /// The same as the largest element difference over `max |d_one|`.
    pub delta_max_rel: f64,
}

impl Case {
    pub fn passed(&self) -> bool {
        self.grad_rel <= TOLERANCE && self.update_rel <= TOLERANCE
    }
}

/// What the four aggregations are called in configs.
pub const AGGREGATIONS: [LossAggregation; 4] = [LossAggregation::Grpo, LossAggregation::Bnpo, LossAggregation::DrGrpo, LossAggregation::Dapo];

/// Runs every case on `episodes` (groups of `cfg.rollout.group` in order);
/// every rank calls it; rank 0 gets the cases, the others an empty list.
pub fn run(dist: &Dist, cfg: &RunConfig, model_cfg: &ModelConfig, weights: &TensorMap, episodes: &[Episode]) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    for agg in AGGREGATIONS {
        let mut c = cfg.clone();
        c.grpo.aggregation = agg;
        let name = serde_json::to_value(agg).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
        let ranks = grpo_update(dist.clone(), &c, model_cfg, weights, episodes)?;
        trainer::dist::reduce::check_same_parameters(&**dist, &ranks.1, 1)?;
        if dist.rank() == 0 {
            let one = grpo_update(Arc::new(Single), &c, model_cfg, weights, episodes)?;
            cases.push(compare(name, weights, &ranks, &one)?);
        }
    }
    // GSPO: one ratio per sequence, whose mean must not cross the ranks' shares.
    let mut c = cfg.clone();
    c.grpo.aggregation = LossAggregation::Grpo;
    c.grpo.importance_sampling = trainer::grpo::ImportanceSampling::Sequence;
    let ranks = grpo_update(dist.clone(), &c, model_cfg, weights, episodes)?;
    trainer::dist::reduce::check_same_parameters(&**dist, &ranks.1, 1)?;
    if dist.rank() == 0 {
        let one = grpo_update(Arc::new(Single), &c, model_cfg, weights, episodes)?;
        cases.push(compare("gspo".into(), weights, &ranks, &one)?);
    }
    let batch = sft_batch(episodes, &weights_device(weights))?;
    // A warmup's first step has learning rate 0: the check steps at sft.lr.
    let mut c = cfg.clone();
    c.sft.schedule = trainer::optim::LrSchedule::Constant;
    let ranks = sft_update(dist.clone(), &c, model_cfg, weights, &batch)?;
    trainer::dist::reduce::check_same_parameters(&**dist, &ranks.1, 1)?;
    if dist.rank() == 0 {
        let one = sft_update(Arc::new(Single), &c, model_cfg, weights, &batch)?;
        cases.push(compare("sft".into(), weights, &ranks, &one)?);
    }
    zero_cases(dist, cfg, model_cfg, weights, episodes, &batch, &mut cases)?;
    dist.barrier()?;
    Ok(cases)
}

/// ZeRO-1 (`[optim] zero_stage = 1`): the GRPO (the config's aggregation)
/// and SFT updates with the optimizer state sharded over the ranks must
/// leave every rank with the replicated ranks' weights bit for bit (an
/// error otherwise), and compare with one process as the other cases do
/// (the gradients of rank 0's shard, the weights in full).
fn zero_cases(dist: &Dist, cfg: &RunConfig, model_cfg: &ModelConfig, weights: &TensorMap, episodes: &[Episode], batch: &SftBatch, cases: &mut Vec<Case>) -> Result<()> {
    if dist.world() == 1 {
        return Ok(());
    }
    let mut zero = cfg.clone();
    zero.optim.zero_stage = 1;
    zero.sft.schedule = trainer::optim::LrSchedule::Constant;
    let mut replicated = zero.clone();
    replicated.optim.zero_stage = 0;
    let runs = [
        ("grpo_zero1", grpo_update(dist.clone(), &replicated, model_cfg, weights, episodes)?, grpo_update(dist.clone(), &zero, model_cfg, weights, episodes)?),
        ("sft_zero1", sft_update(dist.clone(), &replicated, model_cfg, weights, batch)?, sft_update(dist.clone(), &zero, model_cfg, weights, batch)?),
    ];
    for (name, rep, sharded) in runs {
        let (h_rep, h_zero) = (trainer::dist::reduce::parameter_hash(&rep.1)?, trainer::dist::reduce::parameter_hash(&sharded.1)?);
        if h_rep != h_zero {
            return Err(Error::invalid("dist-check", format!("{name}: rank {}'s weights after the ZeRO-1 update differ from the replicated update's (hash {h_zero:016x} vs {h_rep:016x})", dist.rank())));
        }
        trainer::dist::reduce::check_same_parameters(&**dist, &sharded.1, 1)?;
        if dist.rank() == 0 {
            let one = if name == "sft_zero1" { sft_update(Arc::new(Single), &replicated, model_cfg, weights, batch)? } else { grpo_update(Arc::new(Single), &replicated, model_cfg, weights, episodes)? };
            let mut shard = one.0.clone();
            shard.retain(|n| sharded.0.get(n).is_some());
            if shard.is_empty() {
                return Err(Error::invalid("dist-check", format!("{name}: rank 0 owns no parameter with a gradient")));
            }
            cases.push(compare(name.into(), weights, &sharded, &(shard, one.1))?);
        }
    }
    Ok(())
}

fn weights_device(weights: &TensorMap) -> candle_core::Device {
    weights.values().next().map_or(candle_core::Device::Cpu, |t| t.device().clone())
}

/// The summed gradient (before clipping) and the weights after one GRPO
/// update with the group `dist`.
fn grpo_update(dist: Dist, cfg: &RunConfig, model_cfg: &ModelConfig, weights: &TensorMap, episodes: &[Episode]) -> Result<(Gradients, TensorMap)> {
    let mut t = grpo::Trainer::new(cfg.clone(), model_cfg, weights, None, None, ChaCha8Rng::seed_from_u64(0))?;
    t.set_dist(dist)?;
    let rewards: Vec<f64> = episodes.iter().map(|e| e.training_reward(&cfg.reward)).collect();
    let g = &cfg.grpo;
    let adv = group_advantages(&rewards, cfg.rollout.group, g.scaling, TRL_ADVANTAGE_EPS, g.zero_std_groups)?;
    let (batch, totals) = t.own_batch(episodes, &adv)?;
    let (grads, metrics) = t.gradients(&batch, totals)?;
    t.apply(grads.clone(), metrics.loss, cfg.optim.lr)?;
    Ok((grads, t.model.tensors()))
}

/// Every episode as an SFT example (its policy tokens are the targets).
fn sft_batch(episodes: &[Episode], device: &candle_core::Device) -> Result<SftBatch> {
    let examples: Vec<SftExample> = episodes
        .iter()
        .map(|e| SftExample { task_id: e.task_id.clone(), sample: e.sample, tokens: e.tokens.clone(), loss_mask: e.loss_mask.clone(), truncated_tokens: 0, reward: 0.0 })
        .collect();
    SftBatch::of(&examples, &(0..examples.len()).collect::<Vec<_>>(), device)
}

/// The summed gradient and the weights after one SFT step with the group `dist`.
fn sft_update(dist: Dist, cfg: &RunConfig, model_cfg: &ModelConfig, weights: &TensorMap, batch: &SftBatch) -> Result<(Gradients, TensorMap)> {
    let mut t = sft::Trainer::new(cfg, model_cfg, weights, None, 1)?;
    t.set_dist(dist, cfg.optim.zero_stage)?;
    let (grads, loss) = t.gradients(batch)?;
    t.apply(grads.clone(), loss)?;
    Ok((grads, t.model.tensors()))
}

/// Differences of `a` from `b` over every tensor of `b` (which `a` must
/// have too): `(max |a - b| / max |b|, ||a - b|| / ||b||)`.
fn rel(a: &std::collections::BTreeMap<String, Tensor>, b: &std::collections::BTreeMap<String, Tensor>) -> Result<(f64, f64)> {
    let (mut diff, mut scale, mut diff_sq, mut scale_sq) = (0f64, 0f64, 0f64, 0f64);
    for (name, want) in b {
        let got = a.get(name).ok_or_else(|| Error::invalid("dist-check", format!("`{name}` is missing on the ranks' side")))?;
        let (got, want) = (got.to_dtype(DType::F64)?.flatten_all()?, want.to_dtype(DType::F64)?.flatten_all()?);
        let d = (&got - &want)?;
        diff = diff.max(d.abs()?.max(0)?.to_scalar::<f64>()?);
        scale = scale.max(want.abs()?.max(0)?.to_scalar::<f64>()?);
        diff_sq += d.sqr()?.sum_all()?.to_scalar::<f64>()?;
        scale_sq += want.sqr()?.sum_all()?.to_scalar::<f64>()?;
    }
    let ratio = |d: f64, s: f64| if s == 0.0 { d } else { d / s };
    Ok((ratio(diff, scale), ratio(diff_sq.sqrt(), scale_sq.sqrt())))
}

fn compare(name: String, before: &TensorMap, ranks: &(Gradients, TensorMap), one: &(Gradients, TensorMap)) -> Result<Case> {
    if ranks.0.len() != one.0.len() {
        return Err(Error::invalid("dist-check", format!("{name}: {} parameters have gradients with the ranks, {} with one process", ranks.0.len(), one.0.len())));
    }
    let grads = |g: &Gradients| g.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let delta = |after: &TensorMap| -> Result<std::collections::BTreeMap<String, Tensor>> {
        after.iter().map(|(k, v)| Ok((k.clone(), (v.to_dtype(DType::F64)? - before[k].to_dtype(DType::F64)?)?))).collect()
    };
    let sorted = |m: &TensorMap| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let (grad_max_rel, grad_rel) = rel(&grads(&ranks.0), &grads(&one.0))?;
    let (_, update_rel) = rel(&sorted(&ranks.1), &sorted(&one.1))?;
    let (delta_max_rel, delta_rel) = rel(&delta(&ranks.1)?, &delta(&one.1)?)?;
    Ok(Case { name, grad_norm: one.0.global_norm()?, grad_rel, grad_max_rel, update_rel, delta_rel, delta_max_rel })
}

/// `groups` x `group` random episodes over a vocabulary of `vocab`: a
/// prompt, then policy turns and tool responses of random lengths, rollout
/// log-probs near the policy's, rewards with a spread (the second group's
/// all equal, one episode cut by the token limit).
pub fn synthetic_episodes(vocab: usize, groups: usize, group: usize, seed: u64) -> Vec<Episode> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(groups * group);
    for g in 0..groups {
        for s in 0..group {
            let mut mask = vec![0u8; rng.random_range(4..9)];
            for turn in 0..rng.random_range(1..4) {
                if turn > 0 {
                    mask.extend(std::iter::repeat_n(0, rng.random_range(2..7)));
                }
                mask.extend(std::iter::repeat_n(1, rng.random_range(3..10)));
            }
            let tokens: Vec<u32> = (0..mask.len()).map(|_| rng.random_range(0..vocab as u32)).collect();
            let logprobs: Vec<f32> = mask.iter().map(|&m| if m == 1 { rng.random_range(-4.0..-0.05) } else { 0.0 }).collect();
            let reward = if g == 1 { 0.5 } else { [0.0, 0.25, 0.6, 1.0][rng.random_range(0..4)] };
            let stop = if g == 0 && s == 0 { StopReason::MaxTokens } else { StopReason::Answer };
            out.push(Episode {
                task_id: format!("task-{g}"),
                sample: s,
                prompt_tokens: mask.iter().position(|&m| m == 1).unwrap_or(0),
                tokens,
                logprobs,
                loss_mask: mask,
                turns: Vec::new(),
                phase: Phase::Done(stop),
                answer: Vec::new(),
                score: Some(Score { f1_file: reward, f1_func: reward, f1: reward, e: 0.0, reward }),
                seconds: 0.0,
            });
        }
    }
    out
}

/// Rank 0's table (and whether every case passed).
pub fn table(cases: &[Case], dist: &dyn Collective) -> String {
    let mut s = format!(
        "dist-check: {} ranks ({}); held to {TOLERANCE:.0e}: grad_rel (the summed gradient) and update_rel (the weights after the AdamW step), \
         both ||ranks - one|| / ||one|| over every parameter; reported: the largest element difference over the largest element (*_max_rel) \
         and the AdamW step itself (delta)\n{:<8} {:>10} {:>12} {:>12} {:>12} {:>12} {:>14}\n",
        dist.world(),
        dist.backend(),
        "case",
        "grad_norm",
        "grad_rel",
        "grad_max_rel",
        "update_rel",
        "delta_rel",
        "delta_max_rel"
    );
    for c in cases {
        s += &format!(
            "{:<8} {:>10.3e} {:>12.3e} {:>12.3e} {:>12.3e} {:>12.3e} {:>14.3e}  {}\n",
            c.name,
            c.grad_norm,
            c.grad_rel,
            c.grad_max_rel,
            c.update_rel,
            c.delta_rel,
            c.delta_max_rel,
            if c.passed() { "PASS" } else { "FAIL" }
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainer::dist::local::LocalGroup;

    fn tiny() -> (ModelConfig, TensorMap, RunConfig) {
        let model_cfg = ModelConfig::new_tiny(64, 32, 64, 2, 4, 2, 8, true);
        let weights = lm::init::random_weights(&model_cfg, 3, DType::F32, &candle_core::Device::Cpu).unwrap();
        let text = "name = \"t\"\n[model]\npath = \"unused\"\n[env]\nrepos_dir = \"unused\"\n\
                    [rollout]\ngroup = 4\n[train]\nmicro_batch_rows = 3\n[optim]\nlr = 1e-3\nmax_grad_norm = 1.0\n";
        let cfg: RunConfig = toml::from_str(text).unwrap();
        (model_cfg, weights, cfg)
    }

    /// Two and three thread ranks against one process: every aggregation
    /// and SFT within the tolerance (three ranks: uneven shares, the KL
    /// term on).
    #[test]
    fn ranks_as_threads_match_one_process() {
        let (model_cfg, weights, cfg) = tiny();
        let episodes = synthetic_episodes(64, 5, 4, 7);
        for world in [2, 3] {
            let mut cfg = cfg.clone();
            if world == 3 {
                cfg.grpo.beta = 0.04;
            }
            let handles: Vec<_> = LocalGroup::ranks(world)
                .into_iter()
                .map(|r| {
                    let (m, w, c, e) = (model_cfg.clone(), weights.clone(), cfg.clone(), episodes.clone());
                    std::thread::spawn(move || {
                        let dist: Dist = Arc::new(r);
                        run(&dist, &c, &m, &w, &e).unwrap()
                    })
                })
                .collect();
            let cases: Vec<Case> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
            assert_eq!(cases.len(), 8, "rank 0 reports 4 aggregations, GSPO, SFT and GRPO and SFT with ZeRO-1");
            for c in &cases {
                println!("{world} ranks: {c:?}");
                assert!(c.passed(), "{world} ranks: {c:?}");
                assert!(c.grad_norm > 0.0, "{world} ranks: {c:?} has no gradient to compare");
            }
        }
    }
}
