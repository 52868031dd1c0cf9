//! Shared plumbing for the CUDA paths: the embedded PTX modules, contiguous
//! views of storages, the f32/bf16 dispatch and launch configurations.
//! Only compiled with feature `cuda`.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, DeviceRepr, LaunchConfig};
use candle_core::cuda_backend::{CudaDType, CudaStorage};
use candle_core::{bail, CudaDevice, DType, Layout, Result};

/// One PTX module built from `kernels/cuda/<name>.cu` by build.rs.
pub(crate) struct Module {
    /// Key under which Candle caches the loaded module on each device.
    pub name: &'static str,
    /// The PTX text.
    pub ptx: &'static str,
}

/// Causal grouped-query attention forward/backward (`cuda/attention.cu`).
pub(crate) const ATTENTION: Module = Module {
    name: "fusegrpo_attention",
    ptx: include_str!(concat!(env!("OUT_DIR"), "/attention.ptx")),
};

/// Fused token log-probs (`cuda/logprobs.cu`).
pub(crate) const LOGPROBS: Module = Module {
    name: "fusegrpo_logprobs",
    ptx: include_str!(concat!(env!("OUT_DIR"), "/logprobs.ptx")),
};

/// RMSNorm forward/backward (`cuda/norm.cu`).
pub(crate) const NORM: Module = Module {
    name: "fusegrpo_norm",
    ptx: include_str!(concat!(env!("OUT_DIR"), "/norm.ptx")),
};

/// Rotary embedding forward/backward (`cuda/rope.cu`).
pub(crate) const ROPE: Module = Module {
    name: "fusegrpo_rope",
    ptx: include_str!(concat!(env!("OUT_DIR"), "/rope.ptx")),
};

/// Next-token sampling (`cuda/sampling.cu`).
pub(crate) const SAMPLING: Module = Module {
    name: "fusegrpo_sampling",
    ptx: include_str!(concat!(env!("OUT_DIR"), "/sampling.ptx")),
};

/// A floating-point element type the kernels are instantiated for; kernel
/// names end in `_{SUFFIX}`.
pub(crate) trait KernelFloat: CudaDType + DeviceRepr {
    /// `f32` or `bf16`.
    const SUFFIX: &'static str;
    /// The matching Candle dtype.
    const DTYPE: DType;
}

impl KernelFloat for f32 {
    const SUFFIX: &'static str = "f32";
    const DTYPE: DType = DType::F32;
}

impl KernelFloat for half::bf16 {
    const SUFFIX: &'static str = "bf16";
    const DTYPE: DType = DType::BF16;
}

/// `name_{f32|bf16}`: a kernel's instantiation for `T`.
pub(crate) fn kernel_name<T: KernelFloat>(name: &str) -> String {
    format!("{name}_{}", T::SUFFIX)
}

/// The float dtype the kernels support that `dtypes` all share, or an error
/// naming the op and the dtypes.
pub(crate) fn common_float(op: &str, dtypes: &[DType]) -> Result<DType> {
    let first = dtypes[0];
    if dtypes.iter().any(|d| *d != first) {
        bail!("{op} (cuda): inputs must share one dtype, got {dtypes:?}");
    }
    match first {
        DType::F32 | DType::BF16 => Ok(first),
        other => bail!("{op} (cuda): only f32 and bf16 are supported, got {other:?}"),
    }
}

/// The contiguous part of `storage` that `layout` describes, as `T`.
pub(crate) fn view<'a, T: CudaDType>(storage: &'a CudaStorage, layout: &Layout, what: &str) -> Result<CudaView<'a, T>> {
    let slice: &CudaSlice<T> = storage.as_cuda_slice::<T>()?;
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(slice.slice(start..end)),
        None => bail!("{what} must be contiguous for the CUDA kernel (call .contiguous() first)"),
    }
}

/// Loads kernel `$name` of `$module` (once per device), pushes the argument
/// references in order and launches it on the device's stream; evaluates to
/// `candle_core::Result<()>`. Every argument must be a reference to a local
/// that outlives the statement (the builder keeps raw pointers), and every
/// call site carries a SAFETY note on the kernel's contract: argument types
/// and order match the `extern "C"` signature, and all indices the grid
/// reaches lie inside the buffers.
macro_rules! launch {
    ($dev:expr, $module:expr, $name:expr, $cfg:expr; $($arg:expr),* $(,)?) => {{
        use candle_core::cuda_backend::cudarc::driver::PushKernelArg as _;
        use candle_core::cuda_backend::WrapErr as _;
        let func = $dev.get_or_load_custom_func(&$name, $module.name, $module.ptx)?;
        let mut builder = func.builder();
        $( builder.arg($arg); )*
        let cfg = $cfg;
        // SAFETY: stated at the call site (see the macro's contract above).
        unsafe { builder.launch(cfg) }.map(|_| ()).w()
    }};
}
pub(crate) use launch;

/// A 1-D launch of `blocks` blocks of `threads` threads.
pub(crate) fn cfg_1d(blocks: usize, threads: u32) -> Result<LaunchConfig> {
    Ok(LaunchConfig { grid_dim: (to_u32(blocks, "grid size")?, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 })
}

/// A 2-D grid of `x * y` blocks of `threads` threads.
pub(crate) fn cfg_2d(x: usize, y: usize, threads: u32) -> Result<LaunchConfig> {
    Ok(LaunchConfig {
        grid_dim: (to_u32(x, "grid x")?, to_u32(y, "grid y")?, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// `n` as the kernels' `int`, or an error naming it.
pub(crate) fn to_i32(n: usize, what: &str) -> Result<i32> {
    i32::try_from(n).or_else(|_| bail!("{what} = {n} exceeds the kernels' 32-bit index range"))
}

fn to_u32(n: usize, what: &str) -> Result<u32> {
    u32::try_from(n).or_else(|_| bail!("{what} = {n} exceeds the CUDA launch limits"))
}

/// Checks that a storage holds `dtype` (integer and gradient inputs).
pub(crate) fn expect_dtype(s: &CudaStorage, dtype: DType, what: &str) -> Result<()> {
    if s.dtype() != dtype {
        bail!("{what} must be {dtype:?} for the CUDA kernel, got {:?}", s.dtype());
    }
    Ok(())
}

/// Wraps a typed device buffer as a Candle storage on `dev`.
pub(crate) fn wrap<T: CudaDType>(slice: CudaSlice<T>, dev: &CudaDevice) -> CudaStorage {
    CudaStorage::wrap_cuda_slice(slice, dev.clone())
}
