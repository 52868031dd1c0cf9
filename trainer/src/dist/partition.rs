//! [`Partition`]: which rank owns each parameter's optimizer state under
//! ZeRO-1 ([`super::zero`]); the reduce-scatter and the all-gather
//! ([`super::reduce`], `super::nccl` (feature `nccl`)) cut their buffers by it.

use candle_core::Var;
use std::collections::BTreeMap;

/// Which rank owns each parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    owner: BTreeMap<String, usize>,
    world: usize,
}

impl Partition {
    /// Contiguous runs in name order: a parameter goes to the rank whose
    /// equal share of all elements holds its middle element.
    pub fn new<'a>(sizes: impl IntoIterator<Item = (&'a String, usize)>, world: usize) -> Self {
        let sizes: Vec<(&String, usize)> = sizes.into_iter().collect();
        let total: u128 = sizes.iter().map(|(_, n)| *n as u128).sum::<u128>().max(1);
        let mut at = 0u128;
        let owner = sizes
            .into_iter()
            .map(|(name, n)| {
                let mid = at + n as u128 / 2;
                at += n as u128;
                (name.clone(), ((mid * world as u128 / total) as usize).min(world.max(1) - 1))
            })
            .collect();
        Partition { owner, world: world.max(1) }
    }

    /// The partition of `params` over `world` ranks.
    pub fn of(params: &BTreeMap<String, Var>, world: usize) -> Self {
        Self::new(params.iter().map(|(n, v)| (n, v.as_tensor().elem_count())), world)
    }

    /// The rank that keeps `name`'s optimizer state (0 for a name not in the partition).
    pub fn owner(&self, name: &str) -> usize {
        self.owner.get(name).copied().unwrap_or(0)
    }

    pub fn world(&self) -> usize {
        self.world
    }

    /// The parameters `rank` owns, in name order.
    pub fn owned(&self, rank: usize) -> impl Iterator<Item = &String> {
        self.owner.iter().filter(move |(_, &r)| r == rank).map(|(n, _)| n)
    }
}
