//! Reductions on top of the all-gather. Every sum adds the ranks' values in
//! rank order (0, 1, ...), on every rank, so all ranks hold the same bits
//! and a rerun gives the same bits, whatever MPI's own algorithms do.

use super::Collective;
use crate::error::{Error, Result};
use crate::optim::Gradients;
use lm::weights::TensorMap;
use candle_core::{DType, Tensor, Var};
use std::collections::BTreeMap;

/// Gradient values per all-gather: 4M f32 (16 MiB per rank per exchange).
pub const BUCKET_VALUES: usize = 4 << 20;

/// Element-wise sum over ranks, added in rank order.
pub fn sum_f64(dist: &dyn Collective, values: &mut [f64]) -> Result<()> {
    fold_ranks(dist, values, 0.0, |acc, x| acc + x)
}

/// Element-wise maximum over ranks.
pub fn max_f64(dist: &dyn Collective, values: &mut [f64]) -> Result<()> {
    fold_ranks(dist, values, f64::NEG_INFINITY, f64::max)
}

/// Each element becomes `f(...f(f(init, rank 0's), rank 1's)..., last rank's)`.
fn fold_ranks(dist: &dyn Collective, values: &mut [f64], init: f64, f: impl Fn(f64, f64) -> f64) -> Result<()> {
    if dist.world() == 1 {
        return Ok(());
    }
    let all = dist.all_gather_f64(values)?;
    let n = values.len();
    for (i, v) in values.iter_mut().enumerate() {
        *v = (0..dist.world()).map(|r| all[r * n + i]).fold(init, &f);
    }
    Ok(())
}

/// Sums `grads` over ranks: every parameter of `params` (name order) that
/// has a gradient on some rank gets the sum of the ranks' gradients (zeros
/// where a rank has none), flattened into f32 buckets of [`BUCKET_VALUES`]
/// and added in rank order. A parameter no rank has a gradient for stays
/// absent. One process: nothing is done. Gradients on a GPU in a build with
/// feature `nccl` are summed there by NCCL instead (`dist::nccl`, built with feature `nccl`).
pub fn sum_gradients(dist: &dyn Collective, params: &BTreeMap<String, Var>, grads: &mut Gradients) -> Result<()> {
    let world = dist.world();
    if world == 1 {
        return Ok(());
    }
    let buckets = gradient_buckets(dist, params, grads)?;
    #[cfg(feature = "nccl")]
    if super::nccl::sum_gradients(dist, params, &buckets, grads)? {
        return Ok(());
    }
    let mut summed = Gradients::default();
    for bucket in buckets {
        let mut flat = flatten(params, &bucket, grads)?;
        let all = dist.all_gather_f32(&flat)?;
        let n = flat.len();
        for (i, v) in flat.iter_mut().enumerate() {
            *v = all[i];
            for r in 1..world {
                *v += all[r * n + i];
            }
        }
        let mut at = 0;
        for name in bucket {
            let t = params[name].as_tensor();
            let len = t.elem_count();
            let g = Tensor::from_slice(&flat[at..at + len], t.dims(), t.device())?;
            summed.add(name, &g)?;
            at += len;
        }
    }
    *grads = summed;
    Ok(())
}

/// The parameters some rank has a gradient for, in name order, cut into
/// buckets of at most [`BUCKET_VALUES`] (a larger parameter is a bucket of
/// its own): the same on every rank.
fn gradient_buckets<'a>(dist: &dyn Collective, params: &'a BTreeMap<String, Var>, grads: &Gradients) -> Result<Vec<Vec<&'a String>>> {
    let world = dist.world();
    let has: Vec<f32> = params.keys().map(|n| if grads.get(n).is_some() { 1.0 } else { 0.0 }).collect();
    let all_has = dist.all_gather_f32(&has)?;
    let present: Vec<&String> = params.keys().enumerate().filter(|&(i, _)| (0..world).any(|r| all_has[r * has.len() + i] != 0.0)).map(|(_, n)| n).collect();
    let mut buckets: Vec<Vec<&String>> = Vec::new();
    let mut filled = usize::MAX;
    for name in present {
        let n = params[name].as_tensor().elem_count();
        if filled.saturating_add(n) > BUCKET_VALUES {
            buckets.push(Vec::new());
            filled = 0;
        }
        buckets.last_mut().expect("a bucket").push(name);
        filled += n;
    }
    Ok(buckets)
}

/// A bucket's gradients flattened into f32 (zeros where this rank has none).
fn flatten(params: &BTreeMap<String, Var>, bucket: &[&String], grads: &Gradients) -> Result<Vec<f32>> {
    let mut flat: Vec<f32> = Vec::new();
    for name in bucket {
        match grads.get(name) {
            Some(g) => flat.extend(g.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?),
            None => flat.extend(std::iter::repeat_n(0f32, params[*name].as_tensor().elem_count())),
        }
    }
    Ok(flat)
}

/// ZeRO-1's sum ([`super::zero`]): as [`sum_gradients`], but each rank
/// keeps the sums of the parameters it owns only, received by a
/// reduce-scatter of each bucket (the same additions in the same order,
/// so the same bits as the all-reduce). On a GPU with feature `nccl` the
/// buckets are all-reduced by NCCL and the others' parameters dropped.
pub fn reduce_scatter_gradients(dist: &dyn Collective, params: &BTreeMap<String, Var>, partition: &super::partition::Partition, grads: &mut Gradients) -> Result<()> {
    let world = dist.world();
    if world == 1 {
        return Ok(());
    }
    let rank = dist.rank();
    let buckets = gradient_buckets(dist, params, grads)?;
    #[cfg(feature = "nccl")]
    if super::nccl::sum_gradients(dist, params, &buckets, grads)? {
        grads.retain(|n| partition.owner(n) == rank);
        return Ok(());
    }
    let mut summed = Gradients::default();
    for bucket in buckets {
        let flat = flatten(params, &bucket, grads)?;
        // The owners are contiguous in name order, so each rank's
        // parameters are one segment of the bucket, in rank order.
        let mut counts = vec![0usize; world];
        for name in &bucket {
            counts[partition.owner(name)] += params[*name].as_tensor().elem_count();
        }
        let mine = dist.reduce_scatter_f32(&flat, &counts)?;
        let mut at = 0;
        for name in bucket.iter().filter(|n| partition.owner(n) == rank) {
            let t = params[*name].as_tensor();
            let len = t.elem_count();
            summed.add(name, &Tensor::from_slice(&mine[at..at + len], t.dims(), t.device())?)?;
            at += len;
        }
    }
    *grads = summed;
    Ok(())
}

/// FNV-1a 64 over every parameter's name and f32 bits (name order).
pub fn parameter_hash(params: &TensorMap) -> Result<u64> {
    let mut h = lm::fnv::Fnv1a::default();
    let mut eat = |bytes: &[u8]| h.eat(bytes);
    let sorted: BTreeMap<&String, &Tensor> = params.iter().collect();
    for (name, t) in sorted {
        eat(name.as_bytes());
        for x in t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()? {
            eat(&x.to_bits().to_le_bytes());
        }
    }
    Ok(h.value())
}

/// Every rank's parameters must be rank 0's, bit for bit: an error naming
/// the first rank that differs (and the step) otherwise. Returns this
/// rank's [`parameter_hash`] (none with one process: nothing to compare).
pub fn check_same_parameters(dist: &dyn Collective, params: &TensorMap, step: u64) -> Result<Option<u64>> {
    if dist.world() == 1 {
        return Ok(None);
    }
    let h = parameter_hash(params)?;
    // Two f64 halves: a u64 does not fit one f64 exactly.
    let all = dist.all_gather_f64(&[(h >> 32) as f64, (h & 0xffff_ffff) as f64])?;
    let of = |r: usize| ((all[2 * r] as u64) << 32) | all[2 * r + 1] as u64;
    for r in 1..dist.world() {
        if of(r) != of(0) {
            return Err(Error::invalid(
                "data parallelism",
                format!("at step {step} rank {r}'s parameters differ from rank 0's (hash {:016x} vs {:016x}): the ranks diverged", of(r), of(0)),
            ));
        }
    }
    Ok(Some(h))
}
