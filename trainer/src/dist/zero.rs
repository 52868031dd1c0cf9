//! ZeRO stage 1 (`[optim] zero_stage = 1`): the optimizer state sharded
//! over the data-parallel ranks. Each parameter has one owner rank, which
//! alone keeps its f32 master and AdamW moments; a step then runs
//!
//! 1. gradients reduce-scattered: each rank gets the sum over ranks (added
//!    in rank order, as the replicated all-reduce) of its own parameters'
//!    gradients only ([`Sharding::sum_gradients`]);
//! 2. the global gradient norm from the owners' per-tensor norms, added in
//!    name order as [`crate::optim::Gradients::global_norm`] adds them, and
//!    the clip applied by each owner ([`Sharding::clip`]);
//! 3. AdamW on the owned parameters;
//! 4. the updated weights all-gathered from their owners
//!    ([`Sharding::gather_parameters`]).
//!
//! Every step is element-wise or adds in the replicated order, so the
//! weights after a ZeRO-1 step are bit for bit those of the replicated step
//! (the MPI tests compare them). The owners are contiguous runs of the
//! parameters in name order, balanced by element count: they depend only on
//! the names, the shapes and the world size, so a checkpoint (one optimizer
//! file per rank, [`crate::checkpoint`]) resumes on any number of ranks.
//!
//! The gradient accumulator over micro-batches stays whole on every rank
//! (ZeRO-2 would shard it too): the planner counts it so.

use crate::optim::Update;
use super::partition::Partition;
use super::Collective;
use crate::error::{Error, Result};
use crate::optim::{clip_coefficient, tensor_norm, AdamW, AdamWConfig, Gradients};
use candle_core::{Tensor, Var};
use std::collections::BTreeMap;

/// Bytes of updated weights each rank sends per all-gather round (16 MiB,
/// as a gradient bucket): a round holds every rank's bytes twice over
/// (MPI's receive buffer and their copies), so rounds stay small.
pub const GATHER_BYTES: usize = 16 << 20;

/// How a trainer's optimizer step spans the ranks.
#[derive(Debug, Clone)]
pub enum Sharding {
    /// Every rank keeps the whole optimizer state and updates every weight.
    Replicated,
    /// ZeRO-1 over the partition's ranks.
    Zero1(Partition),
}

impl Sharding {
    /// `[optim] zero_stage` for `params` on `dist`'s ranks (one process:
    /// replicated, whatever the stage: there is nothing to shard).
    pub fn new(stage: u8, params: &BTreeMap<String, Var>, dist: &dyn Collective) -> Self {
        if stage == 0 || dist.world() == 1 {
            return Sharding::Replicated;
        }
        Sharding::Zero1(Partition::of(params, dist.world()))
    }

    /// The sharding of `params` over `dist`'s ranks (ZeRO `stage` 0 or 1)
    /// and this rank's AdamW over its share: how both trainers set up their
    /// optimizer.
    pub fn with_optimizer(stage: u8, params: &BTreeMap<String, Var>, dist: &dyn Collective, cfg: AdamWConfig) -> Result<(Sharding, AdamW)> {
        let sharding = Sharding::new(stage, params, dist);
        let optimizer = sharding.optimizer(params, cfg, dist.rank())?;
        Ok((sharding, optimizer))
    }

    /// The optimizer for this rank: every parameter's state, or its shard's.
    pub fn optimizer(&self, params: &BTreeMap<String, Var>, cfg: AdamWConfig, rank: usize) -> Result<AdamW> {
        match self {
            Sharding::Replicated => AdamW::new(params, cfg),
            Sharding::Zero1(p) => AdamW::new_shard(params, cfg, |n| p.owner(n) == rank),
        }
    }

    /// The optimizer file this rank writes into a checkpoint, when it
    /// writes its own (`None`: rank 0 writes the whole state).
    pub fn optimizer_file(&self, rank: usize) -> Option<String> {
        match self {
            Sharding::Replicated => None,
            Sharding::Zero1(p) => Some(crate::checkpoint::optimizer_shard_name(rank, p.world())),
        }
    }

    /// Sums the ranks' gradients: every parameter's on every rank
    /// (replicated), or this rank's parameters' only (ZeRO-1).
    pub fn sum_gradients(&self, dist: &dyn Collective, params: &BTreeMap<String, Var>, grads: &mut Gradients) -> Result<()> {
        match self {
            Sharding::Replicated => super::reduce::sum_gradients(dist, params, grads),
            Sharding::Zero1(p) => super::reduce::reduce_scatter_gradients(dist, params, p, grads),
        }
    }

    /// The global gradient norm before clipping, with the gradients clipped
    /// to `max_norm` when it is positive and the norm finite (as
    /// [`Gradients::clip_global_norm`]); under ZeRO-1 each rank holds and
    /// clips its own parameters' gradients, and every rank gets the norm.
    pub fn clip(&self, dist: &dyn Collective, params: &BTreeMap<String, Var>, grads: &mut Gradients, max_norm: f64) -> Result<f64> {
        let total = match self {
            Sharding::Replicated => grads.global_norm()?,
            Sharding::Zero1(p) => {
                // Each parameter's norm from its owner (0 where it has no
                // gradient: adding +0.0 leaves a sum of squares as it is).
                let rank = dist.rank();
                let local: Vec<f64> = params
                    .keys()
                    .map(|n| match grads.get(n) {
                        Some(g) if p.owner(n) == rank => tensor_norm(g),
                        _ => Ok(0.0),
                    })
                    .collect::<Result<_>>()?;
                let all = dist.all_gather_f64(&local)?;
                let k = local.len();
                let mut sq = 0f64;
                for (i, name) in params.keys().enumerate() {
                    let n = all[p.owner(name) * k + i];
                    sq += n * n;
                }
                sq.sqrt()
            }
        };
        if max_norm > 0.0 && total.is_finite() {
            grads.scale(clip_coefficient(max_norm, total))?;
        }
        Ok(total)
    }

    /// One optimizer update from the summed gradients, as GRPO and SFT both
    /// make it: clip (or measure) the global norm, then, unless the norm or
    /// `loss` is NaN/inf, AdamW at `lr` and (ZeRO-1) the weights gathered.
    pub fn update(&self, dist: &dyn Collective, optimizer: &mut AdamW, params: &BTreeMap<String, Var>, mut grads: Gradients, max_norm: f64, loss: f64, lr: f64) -> Result<Update> {
        let grad_norm = self.clip(dist, params, &mut grads, max_norm)?;
        let skipped = !grad_norm.is_finite() || !loss.is_finite();
        if skipped {
            tracing::warn!(step = optimizer.steps() + 1, grad_norm, "non-finite loss or gradient: update skipped");
        } else {
            optimizer.step(params, &grads, lr)?;
            self.gather_parameters(dist, params)?;
        }
        Ok(Update { grad_norm, skipped })
    }

    /// After the optimizer step: under ZeRO-1, every rank's weights become
    /// their owners' updated ones (nothing to do when replicated).
    pub fn gather_parameters(&self, dist: &dyn Collective, params: &BTreeMap<String, Var>) -> Result<()> {
        match self {
            Sharding::Replicated => Ok(()),
            Sharding::Zero1(p) => gather_parameters(dist, p, params),
        }
    }
}


/// Each rank's owned parameters in rounds of at most [`GATHER_BYTES`] (a
/// larger parameter is a round of its own): the same on every rank.
fn rounds<'a>(p: &'a Partition, params: &BTreeMap<String, Var>, rank: usize) -> Vec<Vec<&'a String>> {
    let mut out: Vec<Vec<&String>> = Vec::new();
    let mut filled = usize::MAX;
    for name in p.owned(rank) {
        let t = params[name].as_tensor();
        let bytes = t.elem_count() * t.dtype().size_in_bytes();
        if filled.saturating_add(bytes) > GATHER_BYTES {
            out.push(Vec::new());
            filled = 0;
        }
        out.last_mut().expect("a round").push(name);
        filled += bytes;
    }
    out
}

/// The all-gather of the updated weights: on the GPU by NCCL broadcasts from
/// each owner (feature `nccl`), else in rounds of raw bytes over the
/// collective.
fn gather_parameters(dist: &dyn Collective, p: &Partition, params: &BTreeMap<String, Var>) -> Result<()> {
    #[cfg(feature = "nccl")]
    if super::nccl::broadcast_parameters(dist, p, params)? {
        return Ok(());
    }
    let world = dist.world();
    let plans: Vec<Vec<Vec<&String>>> = (0..world).map(|r| rounds(p, params, r)).collect();
    let n_rounds = plans.iter().map(Vec::len).max().unwrap_or(0);
    let empty = Vec::new();
    for k in 0..n_rounds {
        let mut bytes = Vec::new();
        for name in plans[dist.rank()].get(k).unwrap_or(&empty) {
            let host = params[*name].as_tensor().to_device(&candle_core::Device::Cpu)?.contiguous()?;
            bytes.extend_from_slice(&safetensors::View::data(&host));
        }
        let all = dist.all_gather_bytes(&bytes)?;
        for (r, got) in all.iter().enumerate() {
            if r == dist.rank() {
                continue;
            }
            let mut at = 0;
            for name in plans[r].get(k).unwrap_or(&empty) {
                let var = &params[*name];
                let t = var.as_tensor();
                let len = t.elem_count() * t.dtype().size_in_bytes();
                let chunk = got.get(at..at + len).ok_or_else(|| {
                    Error::invalid("ZeRO-1", format!("rank {r} sent {} bytes of updated weights; `{name}` needs bytes {at}..{}", got.len(), at + len))
                })?;
                var.set(&Tensor::from_raw_buffer(chunk, t.dtype(), t.dims(), &candle_core::Device::Cpu)?.to_device(t.device())?)?;
                at += len;
            }
            if at != got.len() {
                return Err(Error::invalid("ZeRO-1", format!("rank {r} sent {} bytes of updated weights, expected {at}", got.len())));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("p{i:02}")).collect()
    }

    #[test]
    fn owners_are_contiguous_balanced_and_cover_every_rank_that_can_own() {
        let ns = names(10);
        let p = Partition::new(ns.iter().map(|n| (n, 100)), 3);
        let owners: Vec<usize> = ns.iter().map(|n| p.owner(n)).collect();
        assert!(owners.windows(2).all(|w| w[0] <= w[1]), "{owners:?}");
        for r in 0..3 {
            let c = p.owned(r).count();
            assert!((3..=4).contains(&c), "rank {r} owns {c}: {owners:?}");
        }
        // One big parameter among small ones goes to one rank; nobody owns past the world.
        let sizes = [10usize, 10, 1000, 10, 10];
        let p = Partition::new(ns.iter().zip(sizes), 4);
        assert!(ns[..5].iter().all(|n| p.owner(n) < 4));
        // More ranks than parameters: every parameter still has an owner in range.
        let p = Partition::new(ns[..2].iter().map(|n| (n, 5)), 5);
        assert!(ns[..2].iter().all(|n| p.owner(n) < 5));
    }
}
