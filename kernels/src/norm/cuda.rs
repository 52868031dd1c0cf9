//! CUDA path of RMSNorm over the last dimension (`kernels/cuda/norm.cu`),
//! forward and backward, f32 and bf16 with f32 accumulation. The forward
//! rounds as the plain-tensor reference does: `w * dtype(x * rstd)`.

use crate::cuda_util::{cfg_1d, cfg_2d, common_float, kernel_name, launch, to_i32, view, wrap, KernelFloat, NORM};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::CudaStorage;
use candle_core::{bail, CudaDevice, DType, Layout, Result, Shape};

/// Row groups the weight-gradient reduction splits the rows into.
const DW_ROW_GROUPS: usize = 128;

/// Rows and row length for x [.., D] with w [D].
fn dims(x_l: &Layout, w_l: &Layout) -> Result<(usize, usize)> {
    let d = x_l.shape().dims().last().copied().unwrap_or(0);
    let wd = w_l.shape().dims1()?;
    if d == 0 || d != wd {
        bail!("rms_norm (cuda): x {:?} must end in the weight's length {wd} (> 0)", x_l.shape());
    }
    Ok((x_l.shape().elem_count() / d, d))
}

/// Threads per row block: a multiple of 32 covering D, at most 1024.
fn row_threads(d: usize) -> u32 {
    d.next_power_of_two().clamp(32, 1024) as u32
}

/// Forward `w * x / sqrt(mean(x^2) + eps)` over the last dimension; the body of
/// the RMSNorm op's `cuda_fwd` (x [.., D], w [D], same dtype).
pub(crate) fn rms_norm_fwd_cuda(eps: f64, x: &CudaStorage, x_l: &Layout, w: &CudaStorage, w_l: &Layout) -> Result<(CudaStorage, Shape)> {
    let (rows, d) = dims(x_l, w_l)?;
    let out = match common_float("rms_norm", &[x.dtype(), w.dtype()])? {
        DType::F32 => fwd_typed::<f32>(eps, rows, d, x, x_l, w, w_l)?,
        _ => fwd_typed::<half::bf16>(eps, rows, d, x, x_l, w, w_l)?,
    };
    Ok((out, x_l.shape().clone()))
}

fn fwd_typed<T: KernelFloat>(eps: f64, rows: usize, d: usize, x: &CudaStorage, x_l: &Layout, w: &CudaStorage, w_l: &Layout) -> Result<CudaStorage> {
    let dev = x.device();
    let xv = view::<T>(x, x_l, "x")?;
    let wv = view::<T>(w, w_l, "weight")?;
    let (d_i, eps_f) = (to_i32(d, "D")?, eps as f32);
    // SAFETY: one block per row writes all D values of its row.
    let mut y = unsafe { dev.alloc::<T>(rows * d)? };
    // SAFETY: rms_fwd_T(const T* x, const T* w, int D, float eps, T* y): x and y
    // hold rows*D, w holds D; grid = rows blocks, each touching its row only.
    launch!(dev, NORM, kernel_name::<T>("rms_fwd"), cfg_1d(rows, row_threads(d))?; &xv, &wv, &d_i, &eps_f, &mut y)?;
    Ok(wrap(y, dev))
}

/// Gradient with respect to x (x [.., D], w [D], dy like x; same dtype).
#[allow(clippy::too_many_arguments)]
pub(crate) fn rms_norm_bwd_dx_cuda(
    eps: f64,
    x: &CudaStorage,
    x_l: &Layout,
    w: &CudaStorage,
    w_l: &Layout,
    dy: &CudaStorage,
    dy_l: &Layout,
) -> Result<(CudaStorage, Shape)> {
    let (rows, d) = dims(x_l, w_l)?;
    if dy_l.shape() != x_l.shape() {
        bail!("rms_norm backward (cuda): dy {:?} must have x's shape {:?}", dy_l.shape(), x_l.shape());
    }
    let out = match common_float("rms_norm backward", &[x.dtype(), w.dtype(), dy.dtype()])? {
        DType::F32 => dx_typed::<f32>(eps, rows, d, (x, x_l), (w, w_l), (dy, dy_l))?,
        _ => dx_typed::<half::bf16>(eps, rows, d, (x, x_l), (w, w_l), (dy, dy_l))?,
    };
    Ok((out, x_l.shape().clone()))
}

type In<'a> = (&'a CudaStorage, &'a Layout);

fn dx_typed<T: KernelFloat>(eps: f64, rows: usize, d: usize, x: In, w: In, dy: In) -> Result<CudaStorage> {
    let dev = x.0.device();
    let xv = view::<T>(x.0, x.1, "x")?;
    let wv = view::<T>(w.0, w.1, "weight")?;
    let dyv = view::<T>(dy.0, dy.1, "dy")?;
    let (d_i, eps_f) = (to_i32(d, "D")?, eps as f32);
    // SAFETY: one block per row writes all D values of its row.
    let mut dx = unsafe { dev.alloc::<T>(rows * d)? };
    // SAFETY: rms_bwd_dx_T(const T* x, const T* w, const T* dy, int D,
    // float eps, T* dx): x, dy, dx hold rows*D, w holds D; one block per row.
    launch!(dev, NORM, kernel_name::<T>("rms_bwd_dx"), cfg_1d(rows, row_threads(d))?; &xv, &wv, &dyv, &d_i, &eps_f, &mut dx)?;
    Ok(wrap(dx, dev))
}

/// Gradient with respect to the weight, `[D]` in x's dtype (x [.., D], dy like x).
pub(crate) fn rms_norm_bwd_dw_cuda(eps: f64, x: &CudaStorage, x_l: &Layout, dy: &CudaStorage, dy_l: &Layout) -> Result<(CudaStorage, Shape)> {
    let d = x_l.shape().dims().last().copied().unwrap_or(0);
    if d == 0 || dy_l.shape() != x_l.shape() {
        bail!("rms_norm backward (cuda): dy {:?} must have x's non-empty shape {:?}", dy_l.shape(), x_l.shape());
    }
    let rows = x_l.shape().elem_count() / d;
    let out = match common_float("rms_norm backward", &[x.dtype(), dy.dtype()])? {
        DType::F32 => dw_typed::<f32>(eps, rows, d, (x, x_l), (dy, dy_l))?,
        _ => dw_typed::<half::bf16>(eps, rows, d, (x, x_l), (dy, dy_l))?,
    };
    Ok((out, Shape::from(d)))
}

fn dw_typed<T: KernelFloat>(eps: f64, rows: usize, d: usize, x: In, dy: In) -> Result<CudaStorage> {
    let dev = x.0.device();
    let xv = view::<T>(x.0, x.1, "x")?;
    let dyv = view::<T>(dy.0, dy.1, "dy")?;
    let (rows_i, d_i, eps_f) = (to_i32(rows, "rows")?, to_i32(d, "D")?, eps as f32);
    // SAFETY: one block per row writes rstd[row].
    let mut rstd = unsafe { dev.alloc::<f32>(rows)? };
    // SAFETY: rms_rstd_T(const T* x, int D, float eps, float* out): x holds
    // rows*D, out rows; one block per row.
    launch!(dev, NORM, kernel_name::<T>("rms_rstd"), cfg_1d(rows, row_threads(d))?; &xv, &d_i, &eps_f, &mut rstd)?;
    let mut acc = dev.alloc_zeros::<f32>(d)?;
    // SAFETY: rms_dw_T(const T* x, const T* dy, const float* rstd, int rows,
    // int D, float* acc): threads with col >= D return; rows strided by the
    // grid's y extent stay < rows; acc (zeroed) holds D.
    launch!(dev, NORM, kernel_name::<T>("rms_dw"), cfg_2d(d.div_ceil(256), rows.min(DW_ROW_GROUPS), 256)?;
        &xv, &dyv, &rstd, &rows_i, &d_i, &mut acc)?;
    cast_from_f32::<T>(acc, d, dev)
}

/// Backward in the layout of `RmsNormBackward` (x [.., D], w [D], dy like x):
/// `[rows + 1, D]` in x's dtype, grad_x in the first rows and grad_w last.
/// The body of `RmsNormBackward::cuda_fwd`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rms_norm_bwd_cuda(
    eps: f64,
    x: &CudaStorage,
    x_l: &Layout,
    w: &CudaStorage,
    w_l: &Layout,
    dy: &CudaStorage,
    dy_l: &Layout,
) -> Result<(CudaStorage, Shape)> {
    let (rows, d) = dims(x_l, w_l)?;
    if dy_l.shape() != x_l.shape() {
        bail!("rms_norm backward (cuda): dy {:?} must have x's shape {:?}", dy_l.shape(), x_l.shape());
    }
    let out = match common_float("rms_norm backward", &[x.dtype(), w.dtype(), dy.dtype()])? {
        DType::F32 => packed_bwd_typed::<f32>(eps, rows, d, (x, x_l), (w, w_l), (dy, dy_l))?,
        _ => packed_bwd_typed::<half::bf16>(eps, rows, d, (x, x_l), (w, w_l), (dy, dy_l))?,
    };
    Ok((out, Shape::from((rows + 1, d))))
}

fn packed_bwd_typed<T: KernelFloat>(eps: f64, rows: usize, d: usize, x: In, w: In, dy: In) -> Result<CudaStorage> {
    let dev = x.0.device();
    let xv = view::<T>(x.0, x.1, "x")?;
    let wv = view::<T>(w.0, w.1, "weight")?;
    let dyv = view::<T>(dy.0, dy.1, "dy")?;
    let (rows_i, d_i, eps_f, d_i64) = (to_i32(rows, "rows")?, to_i32(d, "D")?, eps as f32, d as i64);
    // SAFETY: every element is written: rows*D by rms_bwd_dx, the last D by the cast.
    let mut out = unsafe { dev.alloc::<T>((rows + 1) * d)? };
    {
        let mut dx = out.slice_mut(0..rows * d);
        // SAFETY: rms_bwd_dx_T(const T* x, const T* w, const T* dy, int D,
        // float eps, T* dx): x, dy, dx hold rows*D, w holds D; one block per row.
        launch!(dev, NORM, kernel_name::<T>("rms_bwd_dx"), cfg_1d(rows, row_threads(d))?; &xv, &wv, &dyv, &d_i, &eps_f, &mut dx)?;
    }
    // SAFETY: one block per row writes rstd[row].
    let mut rstd = unsafe { dev.alloc::<f32>(rows)? };
    // SAFETY: rms_rstd_T(const T* x, int D, float eps, float* out): x holds rows*D, out rows.
    launch!(dev, NORM, kernel_name::<T>("rms_rstd"), cfg_1d(rows, row_threads(d))?; &xv, &d_i, &eps_f, &mut rstd)?;
    let mut acc = dev.alloc_zeros::<f32>(d)?;
    // SAFETY: rms_dw_T(const T* x, const T* dy, const float* rstd, int rows,
    // int D, float* acc): threads with col >= D return; acc (zeroed) holds D.
    launch!(dev, NORM, kernel_name::<T>("rms_dw"), cfg_2d(d.div_ceil(256), rows.min(DW_ROW_GROUPS), 256)?;
        &xv, &dyv, &rstd, &rows_i, &d_i, &mut acc)?;
    let mut dw = out.slice_mut(rows * d..(rows + 1) * d);
    // SAFETY: rms_cast_T(const float* src, int64_t n, T* dst): acc and the
    // last row of `out` hold D.
    launch!(dev, NORM, kernel_name::<T>("rms_cast"), cfg_1d(d.div_ceil(256), 256)?; &acc, &d_i64, &mut dw)?;
    Ok(wrap(out, dev))
}

/// An f32 accumulator as a storage of `T` (no copy for f32).
fn cast_from_f32<T: KernelFloat>(acc: candle_core::cuda_backend::cudarc::driver::CudaSlice<f32>, len: usize, dev: &CudaDevice) -> Result<CudaStorage> {
    if T::DTYPE == DType::F32 {
        return Ok(wrap(acc, dev));
    }
    // SAFETY: the cast kernel writes every element < len.
    let mut out = unsafe { dev.alloc::<T>(len)? };
    let len_i = len as i64;
    // SAFETY: rms_cast_T(const float* src, int64_t n, T* dst): both hold len.
    launch!(dev, NORM, kernel_name::<T>("rms_cast"), cfg_1d(len.div_ceil(256), 256)?; &acc, &len_i, &mut out)?;
    Ok(wrap(out, dev))
}
