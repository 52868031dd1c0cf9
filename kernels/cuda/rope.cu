// Rotary embedding, rotate-half layout (transformers' Qwen3, as
// trainer/src/model/rope.rs): for i < D/2, with c = cos[i], s = sin[i],
//   y[i] = x[i] c - x[i + D/2] s,   y[i + D/2] = x[i + D/2] c + x[i] s.
// The backward is the same map with s -> -s (the rotation's transpose).
// x: [B, H, T, D] contiguous. cos/sin rows: (b * T + t) * cs_row (cs_batched)
// or t * cs_row, of which the first D/2 values are read (a full-width table
// repeats its first half).
#include "common.cuh"

template <typename T>
__device__ void rope(const T *x, const T *cos, const T *sin, int B, int H, int Tn, int D,
                     int cs_row, int cs_batched, float sign, T *y) {
  const int half = D / 2;
  const int64_t total = (int64_t)B * H * Tn * half;
  for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < total;
       p += (int64_t)gridDim.x * blockDim.x) {
    const int i = (int)(p % half);
    const int64_t bht = p / half;
    const int t = (int)(bht % Tn);
    const int b = (int)(bht / ((int64_t)H * Tn));
    const int64_t cs = ((cs_batched ? (int64_t)b * Tn : 0) + t) * cs_row + i;
    const float c = to_f32(cos[cs]), s = sign * to_f32(sin[cs]);
    const int64_t base = bht * D;
    const float x1 = to_f32(x[base + i]), x2 = to_f32(x[base + i + half]);
    y[base + i] = from_f32<T>(x1 * c - x2 * s);
    y[base + i + half] = from_f32<T>(x2 * c + x1 * s);
  }
}

#define ROPE_KERNELS(T, SUF)                                                                     \
  extern "C" __global__ void rope_##SUF(const T *x, const T *cos, const T *sin, int B, int H,   \
                                        int Tn, int D, int cs_row, int cs_batched, float sign,    \
                                        T *y) {                                                   \
    rope<T>(x, cos, sin, B, H, Tn, D, cs_row, cs_batched, sign, y);                               \
  }

ROPE_KERNELS(float, f32)
ROPE_KERNELS(__nv_bfloat16, bf16)
