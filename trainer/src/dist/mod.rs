//! Data parallelism: one process per device, each with every weight, each
//! rolling out (GRPO) or training on (SFT) its share of a step's data, the
//! gradients summed across processes before the same AdamW step everywhere.
//!
//! - [`Collective`]: what a group of ranks can do together (all-gather of
//!   f32/f64/bytes, barrier, abort). [`Single`] is one process (every call
//!   returns its input: nothing changes without MPI); `mpi` (feature `mpi`)
//!   is MPI's `MPI_COMM_WORLD`; [`local::LocalGroup`] is ranks as threads of
//!   one process, for tests.
//! - [`reduce`]: sums on top of the all-gather, always added in rank order,
//!   so every rank gets the same bits (gradients in flat f32 buckets).
//! - [`launch`]: how the binary finds out it was started by `mpirun`/`srun`.
//! - [`zero`]: ZeRO-1, the optimizer state sharded by a [`partition::Partition`].
//!
//! The data-parallel update is checked against one process's by
//! `apps::dist_check` (`fusegrpo dist-check`).

pub mod partition;
pub mod launch;
pub mod local;
#[cfg(feature = "mpi")]
pub mod mpi;
#[cfg(feature = "nccl")]
pub mod nccl;
pub mod reduce;
pub mod zero;

use crate::error::{Error, Result};
use std::ops::Range;
use std::sync::{Arc, OnceLock};

/// What a group of ranks does together. Every rank must make the same calls
/// in the same order (as with MPI's collectives); a rank that fails instead
/// calls [`Collective::abort`], which ends every rank.
pub trait Collective: Send + Sync {
    /// This process's rank, `0..world()`.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn world(&self) -> usize;
    /// Rank among the ranks on this node: the GPU it takes (`cuda:<local rank>`).
    fn local_rank(&self) -> usize;
    /// Every rank's `local`, in rank order (`world() * local.len()` values);
    /// `local` has the same length on every rank.
    fn all_gather_f32(&self, local: &[f32]) -> Result<Vec<f32>>;
    /// [`Collective::all_gather_f32`] for f64.
    fn all_gather_f64(&self, local: &[f64]) -> Result<Vec<f64>>;
    /// Every rank's bytes (any length each), in rank order.
    fn all_gather_bytes(&self, local: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// Reduce-scatter: `local` is cut into `counts.len() == world()`
    /// consecutive segments (`counts[r]` values for rank r); this rank gets
    /// the element-wise sum of every rank's segment for it, added in rank
    /// order (the same bits as [`reduce`]'s all-gather sums). The default
    /// all-gathers everything; MPI sends each rank its segments only.
    fn reduce_scatter_f32(&self, local: &[f32], counts: &[usize]) -> Result<Vec<f32>> {
        let (rank, world, n) = (self.rank(), self.world(), local.len());
        check_counts(counts, world, n)?;
        let all = self.all_gather_f32(local)?;
        let at: usize = counts[..rank].iter().sum();
        let mut out = all[at..at + counts[rank]].to_vec();
        for r in 1..world {
            for (o, x) in out.iter_mut().zip(&all[r * n + at..r * n + at + counts[rank]]) {
                *o += x;
            }
        }
        Ok(out)
    }
    /// Waits for every rank.
    fn barrier(&self) -> Result<()>;
    /// Ends every rank's process with `code` (MPI_Abort): no rank is left
    /// waiting in a collective for one that failed.
    fn abort(&self, code: i32) -> !;
    /// `single`, `mpi` or `threads`.
    fn backend(&self) -> &'static str;
}

/// `counts` must give every rank a segment and cover `n` values.
pub(crate) fn check_counts(counts: &[usize], world: usize, n: usize) -> Result<()> {
    if counts.len() != world || counts.iter().sum::<usize>() != n {
        return Err(Error::invalid("reduce-scatter", format!("{} segments of {} values in all for {world} ranks and {n} values", counts.len(), counts.iter().sum::<usize>())));
    }
    Ok(())
}

/// A shared handle to the process's group.
pub type Dist = Arc<dyn Collective>;

/// One process alone: rank 0 of 1.
#[derive(Debug, Clone, Copy, Default)]
pub struct Single;

impl Collective for Single {
    fn rank(&self) -> usize {
        0
    }
    fn world(&self) -> usize {
        1
    }
    fn local_rank(&self) -> usize {
        0
    }
    fn all_gather_f32(&self, local: &[f32]) -> Result<Vec<f32>> {
        Ok(local.to_vec())
    }
    fn all_gather_f64(&self, local: &[f64]) -> Result<Vec<f64>> {
        Ok(local.to_vec())
    }
    fn all_gather_bytes(&self, local: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(vec![local.to_vec()])
    }
    fn barrier(&self) -> Result<()> {
        Ok(())
    }
    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }
    fn backend(&self) -> &'static str {
        "single"
    }
}

static CURRENT: OnceLock<Dist> = OnceLock::new();

/// The process's group: the one [`set_current`] installed at start-up
/// (MPI under `mpirun`), else [`Single`].
pub fn current() -> Dist {
    CURRENT.get().cloned().unwrap_or_else(|| Arc::new(Single))
}

/// Installs the process's group (once, at start-up).
pub fn set_current(dist: Dist) -> Result<()> {
    CURRENT.set(dist).map_err(|_| Error::invalid("data parallelism", "the process group was already set"))
}

/// This rank's contiguous share of `n` items (groups of a GRPO step, rows of
/// an SFT batch): the first `n % world` ranks take one more. Depends only
/// on `n`, the rank and the world size.
pub fn share(dist: &dyn Collective, n: usize) -> Range<usize> {
    share_of(n, dist.rank(), dist.world())
}

/// [`share`] of rank `rank` in a world of `world`.
pub fn share_of(n: usize, rank: usize, world: usize) -> Range<usize> {
    let (base, extra) = (n / world, n % world);
    let start = rank * base + rank.min(extra);
    start..start + base + usize::from(rank < extra)
}

/// Every rank's value of `local` (JSON through the byte all-gather), in rank order.
pub fn gather_json<T: serde::Serialize + serde::de::DeserializeOwned>(dist: &dyn Collective, local: &T) -> Result<Vec<T>> {
    let bytes = serde_json::to_vec(local).map_err(|e| Error::invalid("data parallelism", format!("encoding for the all-gather: {e}")))?;
    dist.all_gather_bytes(&bytes)?
        .iter()
        .enumerate()
        .map(|(r, b)| serde_json::from_slice(b).map_err(|e| Error::invalid("data parallelism", format!("decoding rank {r}'s data: {e}"))))
        .collect()
}

/// Every rank's items concatenated in rank order (one process: `local` as
/// it is, not re-encoded).
pub fn gather_concat<T: serde::Serialize + serde::de::DeserializeOwned>(dist: &dyn Collective, local: Vec<T>) -> Result<Vec<T>> {
    if dist.world() == 1 {
        return Ok(local);
    }
    Ok(gather_json(dist, &local)?.into_iter().flatten().collect())
}

/// Whether any rank says `flag` (e.g. a SIGINT seen by one rank stops all of
/// them at the same step).
pub fn any(dist: &dyn Collective, flag: bool) -> Result<bool> {
    if dist.world() == 1 {
        return Ok(flag);
    }
    Ok(dist.all_gather_f64(&[f64::from(u8::from(flag))])?.iter().any(|&x| x != 0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_every_item_once_in_order() {
        for n in 0..20 {
            for world in 1..6 {
                let ranges: Vec<Range<usize>> = (0..world).map(|r| share_of(n, r, world)).collect();
                assert_eq!(ranges[0].start, 0);
                assert_eq!(ranges[world - 1].end, n);
                for w in ranges.windows(2) {
                    assert_eq!(w[0].end, w[1].start, "n {n} world {world}: contiguous");
                    assert!(w[0].len() >= w[1].len() && w[0].len() <= w[1].len() + 1, "balanced");
                }
            }
        }
        assert_eq!(share_of(5, 0, 2), 0..3);
        assert_eq!(share_of(5, 1, 2), 3..5);
    }

    #[test]
    fn single_returns_its_input() {
        let s = Single;
        assert_eq!(s.all_gather_f32(&[1.0, 2.0]).unwrap(), vec![1.0, 2.0]);
        assert_eq!(gather_json(&s, &vec![3u32]).unwrap(), vec![vec![3u32]]);
        assert!(any(&s, true).unwrap());
        assert_eq!(share(&s, 7), 0..7);
    }
}
