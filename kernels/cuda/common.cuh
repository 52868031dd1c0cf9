// Shared helpers for the fused kernels: dtype conversion, the online
// soft-max merge, a block sum and an f32 -> T copy.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
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
