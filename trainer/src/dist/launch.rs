//! Start-up under a launcher: `mpirun -n N fusegrpo ...` (OpenMPI, MPICH)
//! or `srun` (Slurm) start N processes and tell each, in its environment,
//! that it is one of N. A binary built with `--features mpi` then joins
//! MPI's world; one built without refuses to run N copies of a
//! single-process job. Without a launcher nothing changes.

#[cfg(not(feature = "mpi"))]
use crate::error::Error;
use crate::error::Result;

/// The number of ranks the launcher's environment announces, if any:
/// OpenMPI's `OMPI_COMM_WORLD_SIZE`, MPICH/PMI's `PMI_SIZE`, or Slurm's
/// `SLURM_NTASKS` under PMIx (`PMIX_RANK` set).
pub fn launcher_world_size() -> Option<usize> {
    let var = |k: &str| std::env::var(k).ok().and_then(|v| v.trim().parse::<usize>().ok());
    var("OMPI_COMM_WORLD_SIZE")
        .or_else(|| var("PMI_SIZE"))
        .or_else(|| std::env::var_os("PMIX_RANK").and_then(|_| var("SLURM_NTASKS")))
}

/// Holds MPI (when it was started) until the process is done: dropping it
/// finalises MPI.
pub struct Launch {
    #[cfg(feature = "mpi")]
    _universe: Option<mpi::environment::Universe>,
}

/// Joins the launcher's world when there is one (installing it as
/// [`super::current`]) and makes a failing rank take the whole job down:
/// a panic or an error on any rank ends every rank, naming it.
pub fn init() -> Result<Launch> {
    let announced = launcher_world_size();
    #[cfg(feature = "mpi")]
    {
        if announced.is_some() {
            let (universe, world) = super::mpi::init()?;
            let world: super::Dist = std::sync::Arc::new(world);
            super::set_current(world.clone())?;
            if world.world() > 1 {
                abort_on_panic(world);
            }
            return Ok(Launch { _universe: Some(universe) });
        }
        Ok(Launch { _universe: None })
    }
    #[cfg(not(feature = "mpi"))]
    {
        match announced {
            Some(n) if n > 1 => Err(Error::invalid(
                "data parallelism",
                format!(
                    "started by a launcher as one of {n} ranks, but this fusegrpo was built without MPI: \
                     rebuild with `cargo build --release --features mpi` (docs/data-parallel.md), \
                     or run one process"
                ),
            )),
            _ => Ok(Launch {}),
        }
    }
}

impl Launch {
    /// A command's error on this rank: with several ranks, printed with the
    /// rank and then every rank is ended (MPI_Abort), so none waits in a
    /// collective for this one.
    /// `err` is shown with its causes (`{:#}`).
    pub fn fail(&self, err: &dyn std::fmt::Display) {
        let dist = super::current();
        if dist.world() > 1 {
            crate::progress::say(&format!("fusegrpo rank {} of {}: error: {err:#}", dist.rank(), dist.world()));
            dist.abort(1);
        }
    }
}

/// A panic on this rank prints as usual, names the rank, and ends every rank.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
fn abort_on_panic(world: super::Dist) {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        crate::progress::say(&format!("fusegrpo rank {} of {}: panicked; ending every rank", world.rank(), world.world()));
        world.abort(101);
    }));
}
