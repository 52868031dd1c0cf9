// RMSNorm over the last dimension with backward, rows of D values, f32
// accumulation. Forward rounds like the plain-tensor reference
// (trainer/src/model/ops.rs): y = w * T(x * rstd), rstd = 1/sqrt(mean(x^2) + eps).
// Backward: dx = rstd g - rstd^3 x (g . x) / D with g = dy w; dw = sum_rows dy x rstd.
#include "common.cuh"

template <typename T> __device__ float row_rstd(const T *x, int D, float eps) {
  float ss = 0.0f;
  for (int k = threadIdx.x; k < D; k += blockDim.x) {
    const float v = to_f32(x[k]);
    ss = fmaf(v, v, ss);
  }
  return rsqrtf(block_sum(ss) / (float)D + eps);
}

// One block per row.
template <typename T> __device__ void fwd(const T *x, const T *w, int D, float eps, T *y) {
  const int64_t base = (int64_t)blockIdx.x * D;
  const float r = row_rstd(x + base, D, eps);
  for (int k = threadIdx.x; k < D; k += blockDim.x) {
    const float normed = to_f32(from_f32<T>(to_f32(x[base + k]) * r));
    y[base + k] = from_f32<T>(normed * to_f32(w[k]));
  }
}

// One block per row.
template <typename T>
__device__ void bwd_dx(const T *x, const T *w, const T *dy, int D, float eps, T *dx) {
  const int64_t base = (int64_t)blockIdx.x * D;
  const float r = row_rstd(x + base, D, eps);
  float gx = 0.0f;
  for (int k = threadIdx.x; k < D; k += blockDim.x)
    gx = fmaf(to_f32(dy[base + k]) * to_f32(w[k]), to_f32(x[base + k]), gx);
  const float c = r * r * r * block_sum(gx) / (float)D;
  for (int k = threadIdx.x; k < D; k += blockDim.x) {
    const float g = to_f32(dy[base + k]) * to_f32(w[k]);
    dx[base + k] = from_f32<T>(r * g - c * to_f32(x[base + k]));
  }
}

// One block per row: rstd[row] (f32).
template <typename T> __device__ void rstd(const T *x, int D, float eps, float *out) {
  const float r = row_rstd(x + (int64_t)blockIdx.x * D, D, eps);
  if (threadIdx.x == 0) out[blockIdx.x] = r;
}

// dw_acc[col] += sum over this block's rows of dy x rstd; grid (col blocks,
// row groups), dw_acc zeroed beforehand.
template <typename T>
__device__ void dw(const T *x, const T *dy, const float *rs, int rows, int D, float *dw_acc) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= D) return;
  float acc = 0.0f;
  for (int row = blockIdx.y; row < rows; row += gridDim.y) {
    const int64_t i = (int64_t)row * D + col;
    acc = fmaf(to_f32(dy[i]) * to_f32(x[i]), rs[row], acc);
  }
  atomicAdd(dw_acc + col, acc);
}

#define NORM_KERNELS(T, SUF)                                                                     \
  extern "C" __global__ void rms_fwd_##SUF(const T *x, const T *w, int D, float eps, T *y) {    \
    fwd<T>(x, w, D, eps, y);                                                                      \
  }                                                                                               \
  extern "C" __global__ void rms_bwd_dx_##SUF(const T *x, const T *w, const T *dy, int D,       \
                                              float eps, T *dx) {                                 \
    bwd_dx<T>(x, w, dy, D, eps, dx);                                                              \
  }                                                                                               \
  extern "C" __global__ void rms_rstd_##SUF(const T *x, int D, float eps, float *out) {         \
    rstd<T>(x, D, eps, out);                                                                      \
  }                                                                                               \
  extern "C" __global__ void rms_dw_##SUF(const T *x, const T *dy, const float *rs, int rows,   \
                                          int D, float *dw_acc) {                                 \
    dw<T>(x, dy, rs, rows, D, dw_acc);                                                            \
  }                                                                                               \
  extern "C" __global__ void rms_cast_##SUF(const float *src, int64_t n, T *dst) {              \
    cast_out<T>(src, n, dst);                                                                     \
  }

NORM_KERNELS(float, f32)
NORM_KERNELS(__nv_bfloat16, bf16)
