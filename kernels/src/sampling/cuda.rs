//! CUDA path of the sampling op (`kernels/cuda/sampling.cu`): one block of
//! [`THREADS`] threads per row, logits f32 or bf16 read in place, uniforms
//! f64, out `[rows, 2]` f32 `[token, log-prob]`. Only used where
//! [`crate::has_native_path`] admits CUDA (`FUSEGRPO_CUDA_KERNELS=1` until
//! scripts/gpu-check has passed); elsewhere `sample_tensor` copies the
//! logits to the CPU.

use crate::sampling::SampleMode;
use crate::cuda_util::{cfg_1d, expect_dtype, kernel_name, launch, to_i32, view, wrap, KernelFloat, SAMPLING};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::CudaStorage;
use candle_core::{bail, DType, Layout, Result, Shape};

/// `SAMPLE_THREADS` of sampling.cu: the kernel's shared arrays are this size.
const THREADS: u32 = 256;

/// The kernel's mode and truncation arguments: `(mode, temperature, top_k, top_p)`
/// (`enum SampleMode` of sampling.cu).
fn kernel_args(mode: SampleMode) -> Result<(i32, f32, i32, f64)> {
    Ok(match mode {
        SampleMode::Greedy => (0, 1.0, 0, 1.0),
        SampleMode::Softmax { temperature } => (1, temperature as f32, 0, 1.0),
        SampleMode::Truncated { temperature, top_k, top_p } => (2, temperature as f32, to_i32(top_k, "top_k")?, top_p),
    })
}

/// The body of `SampleOp::cuda_fwd`: logits `[rows, V]`, uniforms `[rows]` f64.
pub(crate) fn sample_cuda(mode: SampleMode, logits: &CudaStorage, l_l: &Layout, us: &CudaStorage, u_l: &Layout) -> Result<(CudaStorage, Shape)> {
    let (rows, v) = l_l.shape().dims2()?;
    if u_l.shape().dims1()? != rows {
        bail!("sample (cuda): {:?} uniforms for {rows} rows", u_l.shape());
    }
    expect_dtype(us, DType::F64, "uniforms")?;
    let out = match logits.dtype() {
        DType::F32 => typed::<f32>(mode, rows, v, (logits, l_l), (us, u_l))?,
        DType::BF16 => typed::<half::bf16>(mode, rows, v, (logits, l_l), (us, u_l))?,
        other => bail!("sample (cuda): logits must be f32 or bf16, got {other:?}"),
    };
    Ok((out, Shape::from((rows, 2))))
}

type In<'a> = (&'a CudaStorage, &'a Layout);

fn typed<T: KernelFloat>(mode: SampleMode, rows: usize, v: usize, logits: In, us: In) -> Result<CudaStorage> {
    let dev = logits.0.device();
    let lv = view::<T>(logits.0, logits.1, "logits")?;
    let uv = view::<f64>(us.0, us.1, "uniforms")?;
    let (mode_i, t, top_k, top_p) = kernel_args(mode)?;
    let v_i = to_i32(v, "V")?;
    // SAFETY: one block per row writes both values of its output row.
    let mut out = unsafe { dev.alloc::<f32>(rows * 2)? };
    // SAFETY: sample_T(const T* logits, const double* uniforms, int V, int mode,
    // float temperature, int top_k, double top_p, float* out): logits hold
    // rows*V, uniforms rows, out 2*rows; grid = rows blocks of THREADS (the
    // kernel's shared arrays), each reading its row and writing its 2 values.
    launch!(dev, SAMPLING, kernel_name::<T>("sample"), cfg_1d(rows, THREADS)?; &lv, &uv, &v_i, &mode_i, &t, &top_k, &top_p, &mut out)?;
    Ok(wrap(out, dev))
}
