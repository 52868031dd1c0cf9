//! Ranks as threads of one process: the same data-parallel code as under
//! MPI, testable without it (each thread holds one [`LocalRank`]).

use super::Collective;
use crate::error::{Error, Result};
use std::sync::{Arc, Barrier, Mutex};

struct Shared {
    slots: Mutex<Vec<Vec<u8>>>,
    barrier: Barrier,
}

/// One rank of a [`LocalGroup`].
#[derive(Clone)]
pub struct LocalRank {
    rank: usize,
    world: usize,
    shared: Arc<Shared>,
}

/// Builds `world` ranks that exchange data through shared memory.
pub struct LocalGroup;

impl LocalGroup {
    /// The ranks `0..world`, one per thread.
    pub fn ranks(world: usize) -> Vec<LocalRank> {
        let shared = Arc::new(Shared { slots: Mutex::new(vec![Vec::new(); world]), barrier: Barrier::new(world) });
        (0..world).map(|rank| LocalRank { rank, world, shared: shared.clone() }).collect()
    }
}

fn lock_error() -> Error {
    Error::invalid("data parallelism", "a thread rank panicked while holding the exchange")
}

impl Collective for LocalRank {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.world
    }
    fn local_rank(&self) -> usize {
        self.rank
    }
    fn all_gather_f32(&self, local: &[f32]) -> Result<Vec<f32>> {
        let bytes: Vec<u8> = local.iter().flat_map(|x| x.to_le_bytes()).collect();
        Ok(self.all_gather_bytes(&bytes)?.concat().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect())
    }
    fn all_gather_f64(&self, local: &[f64]) -> Result<Vec<f64>> {
        let bytes: Vec<u8> = local.iter().flat_map(|x| x.to_le_bytes()).collect();
        Ok(self.all_gather_bytes(&bytes)?.concat().chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect())
    }
    fn all_gather_bytes(&self, local: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.shared.slots.lock().map_err(|_| lock_error())?[self.rank] = local.to_vec();
        self.shared.barrier.wait();
        let all = self.shared.slots.lock().map_err(|_| lock_error())?.clone();
        // Nobody writes the next exchange before everyone has read this one.
        self.shared.barrier.wait();
        Ok(all)
    }
    fn barrier(&self) -> Result<()> {
        self.shared.barrier.wait();
        Ok(())
    }
    fn abort(&self, code: i32) -> ! {
        panic!("thread rank {} of {} aborted with code {code}", self.rank, self.world)
    }
    fn backend(&self) -> &'static str {
        "threads"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_sees_every_rank_in_order() {
        let handles: Vec<_> = LocalGroup::ranks(3)
            .into_iter()
            .map(|r| {
                std::thread::spawn(move || {
                    let f = r.all_gather_f32(&[r.rank() as f32, 10.0]).unwrap();
                    let b = r.all_gather_bytes(&vec![r.rank() as u8; r.rank() + 1]).unwrap();
                    (f, b)
                })
            })
            .collect();
        for h in handles {
            let (f, b) = h.join().unwrap();
            assert_eq!(f, vec![0.0, 10.0, 1.0, 10.0, 2.0, 10.0]);
            assert_eq!(b, vec![vec![0], vec![1, 1], vec![2, 2, 2]]);
        }
    }
}
