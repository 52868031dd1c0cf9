// Shared helpers for the fused kernels: dtype conversion and a small tiled
// GEMM core (64 x 64 output tile, 16-deep k-steps, 256 threads, 4 x 4 values
// per thread, f32 accumulation) that the log-prob kernels reuse with their
// own epilogues.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

#define TILE_M 64
#define TILE_N 64
#define TILE_K 16
#define TILE_THREADS 256

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}

// Strided read-only matrix operand: element (r, c) is p[r * sr + c * sc];
// out-of-range reads give 0. `c_fast` says which index is contiguous in
// memory, so the tile loader walks that index across neighbouring threads.
template <typename T> struct Operand {
  const T *p;
  int64_t sr, sc;
  int rows, cols;
  __device__ __forceinline__ float at(int r, int c) const {
    return (r < rows && c < cols) ? to_f32(p[(int64_t)r * sr + (int64_t)c * sc]) : 0.0f;
  }
};

// Accumulates acc[i][j] += sum_k A(m0 + ty + 16 i, k) * B(k, n0 + tx + 16 j)
// over k in [0, K), A given as (m, k) and B as (k, n). All threads of the
// block must call it (it synchronizes).
template <typename TA, typename TB, bool A_K_FAST, bool B_K_FAST>
__device__ void gemm_tile(const Operand<TA> &A, const Operand<TB> &B, int K, int m0, int n0,
                          float acc[4][4]) {
  __shared__ float As[TILE_K][TILE_M + 1];
  __shared__ float Bs[TILE_K][TILE_N + 1];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  for (int k0 = 0; k0 < K; k0 += TILE_K) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = tid + r * TILE_THREADS;
      int kk, mm;
      if (A_K_FAST) { kk = i % TILE_K; mm = i / TILE_K; } else { mm = i % TILE_M; kk = i / TILE_M; }
      As[kk][mm] = (k0 + kk < K) ? A.at(m0 + mm, k0 + kk) : 0.0f;
      int kb, nb;
      if (B_K_FAST) { kb = i % TILE_K; nb = i / TILE_K; } else { nb = i % TILE_N; kb = i / TILE_N; }
      Bs[kb][nb] = (k0 + kb < K) ? B.at(k0 + kb, n0 + nb) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < TILE_K; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = As[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = Bs[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
}

__device__ __forceinline__ void zero_acc(float acc[4][4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
}

// Combines two online soft-max states: max m, s = sum exp(x - m) and
// u = sum exp(x - m) x (for the entropy), rescaled to the larger max.
__device__ __forceinline__ void softmax_merge(float &m, float &s, float &u, float m2, float s2, float u2) {
  if (m2 == -INFINITY) return;
  if (m == -INFINITY) { m = m2; s = s2; u = u2; return; }
  if (m2 > m) {
    const float c = expf(m - m2);
    s = s * c + s2; u = u * c + u2; m = m2;
  } else {
    const float c = expf(m2 - m);
    s += s2 * c; u += u2 * c;
  }
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the total. All threads must call it.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float warp_sums[32];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x % 32, wid = threadIdx.x / 32, nw = blockDim.x / 32;
  __syncthreads();  // warp_sums may still be read by a previous call
  if (lane == 0) warp_sums[wid] = v;
  __syncthreads();
  float t = 0.0f;
  for (int k = 0; k < nw; ++k) t += warp_sums[k];
  return t;
}

// f32 -> T copy (an f32 accumulator to its output dtype).
template <typename T> __device__ void cast_out(const float *src, int64_t n, T *dst) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = from_f32<T>(src[i]);
}
