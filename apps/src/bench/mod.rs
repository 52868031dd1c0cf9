//! The benchmarks of `fusegrpo bench ...`, each printing one JSON line (or,
//! for `memory` and `grep`, its table) so that time and peak memory can be
//! compared with the PyTorch/transformers counterparts in `scripts/`. Each
//! submodule's `Args` are its options (clap-derived, as the command takes
//! them) and its `run` the benchmark.

pub mod attention;
pub mod checkpoint;
pub mod decode;
pub mod grep;
pub mod search;
pub mod logprob;
pub mod memory;
pub mod model;
pub mod ops;
pub mod shape;
pub mod step;

use anyhow::{ensure, Result};
use candle_core::Device;
use std::cell::Cell;
use std::time::Instant;

thread_local! {
    /// Calls of [`sync_device`] on this thread (what the tests count).
    static SYNCS: Cell<u64> = const { Cell::new(0) };
}

/// Waits until `device` has finished the work queued on it, so that a clock
/// read next counts that work: CUDA queues kernels on a stream and returns
/// at once (`Device::synchronize`); on the CPU every op has finished when it
/// returns and this does nothing. Every benchmark reads its clocks through
/// it ([`Clock`]).
pub fn sync_device(device: &Device) -> Result<()> {
    SYNCS.with(|c| c.set(c.get() + 1));
    device.synchronize()?;
    Ok(())
}

/// How many times [`sync_device`] ran on this thread.
pub fn sync_count() -> u64 {
    SYNCS.with(Cell::get)
}

/// A stopwatch over work on one device: started and read after
/// [`sync_device`], so that queued (asynchronous) work is inside the time.
pub struct Clock {
    device: Device,
    t0: Instant,
}

impl Clock {
    /// Synchronizes `device`, then starts.
    pub fn start(device: &Device) -> Result<Self> {
        sync_device(device)?;
        Ok(Clock { device: device.clone(), t0: Instant::now() })
    }

    /// Seconds since the start, after synchronizing the device.
    pub fn seconds(&self) -> Result<f64> {
        sync_device(&self.device)?;
        Ok(self.t0.elapsed().as_secs_f64())
    }
}

/// A `/proc/self/status` memory field in KiB (0 where unavailable).
pub fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Resets the process's peak RSS (VmHWM) to its current RSS (Linux
/// `clear_refs` value 5); false where unsupported.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Sets the thread count of rayon's pool and of Candle's matmul (which
/// sizes its work by RAYON_NUM_THREADS); `None` keeps all cores.
pub fn set_threads(threads: Option<usize>) -> Result<()> {
    if let Some(t) = threads {
        ensure!(t > 0, "--threads must be positive");
        std::env::set_var("RAYON_NUM_THREADS", t.to_string());
        rayon::ThreadPoolBuilder::new().num_threads(t).build_global()?;
    }
    Ok(())
}

/// The median of `xs` (the mean of the middle two for an even count).
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Minor page faults of this process so far (`/proc/self/stat` field 10; 0
/// where unavailable): a warm step that still faults is re-mapping memory.
pub fn minor_faults() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| s.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(7).and_then(|v| v.parse().ok())))
        .unwrap_or(0)
}

/// Resets the peak of `device`'s memory pool to what is allocated now (see
/// [`device_peak_bytes`]); nothing on the CPU.
pub fn reset_device_peak(device: &Device) -> Result<()> {
    sync_device(device)?;
    #[cfg(feature = "cuda")]
    if let Device::Cuda(d) = device {
        cuda_pool::reset_peak(d)?;
    }
    Ok(())
}

/// The most bytes allocated at once from `device`'s memory pool since
/// [`reset_device_peak`] (CUDA's `CU_MEMPOOL_ATTR_USED_MEM_HIGH`: what the
/// tensors held, not what the pool kept cached, like PyTorch's
/// `max_memory_allocated`); `None` on the CPU (its figure is the RSS) or
/// where the driver has no stream-ordered pool.
pub fn device_peak_bytes(device: &Device) -> Result<Option<u64>> {
    sync_device(device)?;
    #[cfg(feature = "cuda")]
    if let Device::Cuda(d) = device {
        return cuda_pool::peak(d);
    }
    Ok(None)
}

/// The memory-pool attributes of [`device_peak_bytes`], through the driver API.
#[cfg(feature = "cuda")]
mod cuda_pool {
    use anyhow::{bail, Result};
    use candle_core::cuda::cudarc::driver::sys;

    /// The pool `cuMemAllocAsync` allocates from on `d`'s device (the
    /// current one), or `None` without stream-ordered allocation.
    fn pool(d: &candle_core::CudaDevice) -> Result<Option<sys::CUmemoryPool>> {
        let stream = d.cuda_stream();
        let ctx = stream.context();
        if !ctx.has_async_alloc() {
            return Ok(None);
        }
        ctx.bind_to_thread()?;
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: `pool` is a valid out-pointer; the device is the context's.
        let rc = unsafe { sys::cuDeviceGetMemPool(&mut pool, ctx.cu_device()) };
        if rc != sys::CUresult::CUDA_SUCCESS {
            bail!("cuDeviceGetMemPool: {rc:?}");
        }
        Ok(Some(pool))
    }

    pub fn peak(d: &candle_core::CudaDevice) -> Result<Option<u64>> {
        let Some(pool) = pool(d)? else { return Ok(None) };
        let mut value: u64 = 0;
        // SAFETY: USED_MEM_HIGH is a cuuint64_t, `value` is one.
        let rc = unsafe {
            sys::cuMemPoolGetAttribute(pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH, &mut value as *mut u64 as *mut std::ffi::c_void)
        };
        if rc != sys::CUresult::CUDA_SUCCESS {
            bail!("cuMemPoolGetAttribute(USED_MEM_HIGH): {rc:?}");
        }
        Ok(Some(value))
    }

    pub fn reset_peak(d: &candle_core::CudaDevice) -> Result<()> {
        let Some(pool) = pool(d)? else { return Ok(()) };
        let mut zero: u64 = 0;
        // SAFETY: setting USED_MEM_HIGH takes a cuuint64_t 0 (reset to the current use).
        let rc = unsafe {
            sys::cuMemPoolSetAttribute(pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH, &mut zero as *mut u64 as *mut std::ffi::c_void)
        };
        if rc != sys::CUresult::CUDA_SUCCESS {
            bail!("cuMemPoolSetAttribute(USED_MEM_HIGH): {rc:?}");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// A benchmark's options as the command line gives them.
    #[derive(Parser)]
    struct Cli<A: clap::Args> {
        #[command(flatten)]
        args: A,
    }

    fn parse<A: clap::Args>(args: &[&str]) -> A {
        Cli::<A>::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).unwrap().args
    }

    /// On the CPU the helper returns at once (there is nothing queued) and
    /// is counted; a clock's start and each read go through it.
    #[test]
    fn sync_device_is_a_counted_no_op_on_the_cpu() {
        let before = sync_count();
        let t0 = Instant::now();
        for _ in 0..1000 {
            sync_device(&Device::Cpu).unwrap();
        }
        assert!(t0.elapsed().as_secs_f64() < 0.05, "1000 syncs took {:?}", t0.elapsed());
        assert_eq!(sync_count() - before, 1000);
        let clock = Clock::start(&Device::Cpu).unwrap();
        let (a, b) = (clock.seconds().unwrap(), clock.seconds().unwrap());
        assert!(0.0 <= a && a <= b);
        assert_eq!(sync_count() - before, 1003);
        assert_eq!(device_peak_bytes(&Device::Cpu).unwrap(), None);
    }

    /// Each benchmark that runs tensors synchronizes before and after every
    /// timed run (warm-up included): at least two calls per run.
    #[test]
    fn every_benchmark_synchronizes_around_its_timed_runs() {
        let runs: [(&str, Box<dyn Fn(&mut Vec<u8>) -> Result<()>>, u64); 5] = [
            ("attention", Box::new(|out| attention::run(parse(&["--tokens", "16", "--heads", "4", "--kv-heads", "2", "--head-dim", "8", "--mode", "fused", "--backward", "--reps", "3"]), out)), 4),
            ("logprob", Box::new(|out| logprob::run(parse(&["--tokens", "8", "--hidden", "16", "--vocab", "64", "--mode", "fused", "--reps", "3"]), out)), 4),
            ("step", Box::new(|out| step::run(parse(&["--hidden", "16", "--intermediate", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--head-dim", "8", "--vocab", "64", "--rows", "1", "--tokens", "8", "--reps", "3", "--no-optimizer"]), out)), 4),
            ("decode", Box::new(|out| decode::run(parse(&["--hidden", "16", "--intermediate", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--head-dim", "8", "--vocab", "64", "--rows", "2", "--new", "2", "--prompt-len", "3", "--reps", "3"]), out)), 4),
            ("ops", Box::new(|out| ops::run(parse(&["--tokens", "4", "--hidden", "16", "--heads", "2", "--head-dim", "8", "--reps", "3"]), out)), 4 * 3),
        ];
        for (name, run, timed) in runs {
            let before = sync_count();
            let mut out = Vec::new();
            run(&mut out).unwrap();
            let calls = sync_count() - before;
            assert!(calls >= 2 * timed, "bench {name}: {calls} synchronizations for {timed} timed runs");
            // Its report, one JSON line, to the writer it was given.
            let report: serde_json::Value = serde_json::from_slice(&out).unwrap_or_else(|e| panic!("bench {name}: {e}: {}", String::from_utf8_lossy(&out)));
            assert!(report.is_object(), "bench {name}: {report}");
        }
    }
}
