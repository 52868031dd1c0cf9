//! MPI's `MPI_COMM_WORLD` as a [`Collective`] (feature `mpi`: OpenMPI or
//! MPICH through rsmpi). The ranks are the processes `mpirun -n N` or
//! `srun` started; the local rank (the GPU a rank takes) is the rank within
//! the node's shared-memory communicator.

use super::Collective;
use crate::error::{Error, Result};
use mpi::datatype::PartitionMut;
use mpi::environment::Universe;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::CommunicatorCollectives;
use mpi::Count;

/// The world communicator. MPI is initialised `Funneled`: only the thread
/// that started it (the main thread, where the training loop runs) calls
/// MPI, which is what makes sharing the handle sound.
pub struct MpiWorld {
    comm: SimpleCommunicator,
    rank: usize,
    world: usize,
    local_rank: usize,
}

// SAFETY: the handle is only used from the main thread (see the type's doc);
// `Collective` needs `Send + Sync` for the process-wide handle.
unsafe impl Send for MpiWorld {}
unsafe impl Sync for MpiWorld {}

/// Initialises MPI: the universe (dropping it finalises MPI) and the world.
pub fn init() -> Result<(Universe, MpiWorld)> {
    let (universe, _threading) = mpi::initialize_with_threading(mpi::Threading::Funneled)
        .ok_or_else(|| Error::invalid("MPI", "MPI_Init failed or MPI was already initialised"))?;
    let comm = universe.world();
    let local_rank = comm.split_shared(comm.rank()).rank() as usize;
    let world = MpiWorld { rank: comm.rank() as usize, world: comm.size() as usize, local_rank, comm };
    Ok((universe, world))
}

fn count(n: usize, what: &str) -> Result<Count> {
    Count::try_from(n).map_err(|_| Error::invalid("MPI", format!("{what}: {n} elements is more than one MPI message holds")))
}

impl Collective for MpiWorld {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.world
    }
    fn local_rank(&self) -> usize {
        self.local_rank
    }
    fn all_gather_f32(&self, local: &[f32]) -> Result<Vec<f32>> {
        count(local.len() * self.world, "all-gather")?;
        let mut out = vec![0f32; local.len() * self.world];
        self.comm.all_gather_into(local, &mut out[..]);
        Ok(out)
    }
    fn all_gather_f64(&self, local: &[f64]) -> Result<Vec<f64>> {
        count(local.len() * self.world, "all-gather")?;
        let mut out = vec![0f64; local.len() * self.world];
        self.comm.all_gather_into(local, &mut out[..]);
        Ok(out)
    }
    fn all_gather_bytes(&self, local: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mine = count(local.len(), "all-gather of bytes")?;
        let mut counts = vec![0 as Count; self.world];
        self.comm.all_gather_into(&mine, &mut counts[..]);
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        count(total, "all-gather of bytes")?;
        let displs: Vec<Count> = counts.iter().scan(0, |at, &c| { let d = *at; *at += c; Some(d) }).collect();
        let mut buf = vec![0u8; total];
        {
            let mut part = PartitionMut::new(&mut buf[..], counts.clone(), &displs[..]);
            self.comm.all_gather_varcount_into(local, &mut part);
        }
        Ok(counts.iter().zip(&displs).map(|(&c, &d)| buf[d as usize..(d + c) as usize].to_vec()).collect())
    }
    fn reduce_scatter_f32(&self, local: &[f32], counts: &[usize]) -> Result<Vec<f32>> {
        super::check_counts(counts, self.world, local.len())?;
        // Each rank sends rank r its segment for r (all-to-all), then adds
        // the world's segments for itself in rank order.
        let mine = counts[self.rank];
        let send: Vec<Count> = counts.iter().map(|&c| count(c, "reduce-scatter")).collect::<Result<_>>()?;
        let send_displs: Vec<Count> = send.iter().scan(0, |at, &c| { let d = *at; *at += c; Some(d) }).collect();
        let recv = vec![count(mine, "reduce-scatter")?; self.world];
        let recv_displs: Vec<Count> = (0..self.world).map(|r| count(r * mine, "reduce-scatter")).collect::<Result<_>>()?;
        let mut buf = vec![0f32; mine * self.world];
        {
            let part = mpi::datatype::Partition::new(local, send, &send_displs[..]);
            let mut into = PartitionMut::new(&mut buf[..], recv, &recv_displs[..]);
            self.comm.all_to_all_varcount_into(&part, &mut into);
        }
        let mut out = buf[..mine].to_vec();
        for r in 1..self.world {
            for (o, x) in out.iter_mut().zip(&buf[r * mine..(r + 1) * mine]) {
                *o += x;
            }
        }
        Ok(out)
    }
    fn barrier(&self) -> Result<()> {
        self.comm.barrier();
        Ok(())
    }
    fn abort(&self, code: i32) -> ! {
        self.comm.abort(code)
    }
    fn backend(&self) -> &'static str {
        "mpi"
    }
}
