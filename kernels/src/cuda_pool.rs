//! The stream-ordered memory pool's release threshold.
//!
//! Candle allocates through cudarc's `cuMemAllocAsync`, from the device's
//! current memory pool. With the driver's default release threshold (0)
//! the pool hands its unused memory back to the driver at every
//! synchronization (a `to_scalar`, a loss read, the end of a step) and the
//! next step allocates it again from the driver. `keep_pool_memory` sets
//! the threshold to the whole device (`u64::MAX`) once, when the device is
//! opened, so a step reuses the previous step's memory: `nvidia-smi` then
//! shows the pool's high-water mark, not the live tensors. Setting
//! [`POOL_RELEASE_ENV`]`=1` keeps the driver's default instead (the memory
//! goes back to the driver at each synchronization, for a GPU shared with
//! another process).

/// Environment variable: `1` keeps the driver's default release threshold.
pub const POOL_RELEASE_ENV: &str = "FUSEGRPO_CUDA_POOL_RELEASE";

/// What the pool keeps after a synchronization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolRelease {
    /// Threshold `u64::MAX`: freed memory stays in the pool for the next
    /// allocations (the default).
    Keep,
    /// The driver's default (threshold 0): freed memory goes back to the
    /// driver at each synchronization ([`POOL_RELEASE_ENV`]`=1`).
    Driver,
}

impl PoolRelease {
    /// The choice for a value of [`POOL_RELEASE_ENV`] (`None`: unset).
    pub fn from_env_value(value: Option<&str>) -> PoolRelease {
        match value.map(str::trim) {
            Some("1") => PoolRelease::Driver,
            _ => PoolRelease::Keep,
        }
    }

    /// The choice of this process's environment.
    pub fn from_env() -> PoolRelease {
        PoolRelease::from_env_value(std::env::var(POOL_RELEASE_ENV).ok().as_deref())
    }
}

/// Sets the release threshold of `device`'s current memory pool as the
/// environment says ([`PoolRelease::from_env`]) and returns the threshold
/// read back from the driver (`None` when the driver default is kept).
#[cfg(feature = "cuda")]
pub fn keep_pool_memory(device: &candle_core::CudaDevice) -> candle_core::Result<Option<u64>> {
    use candle_core::cuda_backend::cudarc::driver::sys;
    use candle_core::cuda_backend::WrapErr;
    if PoolRelease::from_env() == PoolRelease::Driver {
        return Ok(None);
    }
    let stream = device.cuda_stream();
    let ctx = stream.context();
    ctx.bind_to_thread().w()?;
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let attr = sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
    let mut threshold: u64 = u64::MAX;
    let mut read_back: u64 = 0;
    // SAFETY: the context is current on this thread; `pool` receives the
    // device's current pool; the release threshold attribute is a u64
    // (cuMemPoolSetAttribute / GetAttribute), passed by pointers to locals.
    unsafe {
        sys::cuDeviceGetMemPool(&mut pool, ctx.cu_device()).result().w()?;
        sys::cuMemPoolSetAttribute(pool, attr, &mut threshold as *mut u64 as *mut std::ffi::c_void).result().w()?;
        sys::cuMemPoolGetAttribute(pool, attr, &mut read_back as *mut u64 as *mut std::ffi::c_void).result().w()?;
    }
    Ok(Some(read_back))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_keeps_its_memory_unless_the_environment_says_1() {
        assert_eq!(PoolRelease::from_env_value(None), PoolRelease::Keep);
        assert_eq!(PoolRelease::from_env_value(Some("0")), PoolRelease::Keep);
        assert_eq!(PoolRelease::from_env_value(Some("1")), PoolRelease::Driver);
        assert_eq!(PoolRelease::from_env_value(Some(" 1\n")), PoolRelease::Driver);
    }
}
