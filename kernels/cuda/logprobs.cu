// The row kernel of the token log-prob head on cuBLAS (kernels/src/logprobs/
// cuda.rs): the launcher computes one chunk of tokens' logits z = h W^T / T
// by a cuBLAS GEMM into an f32 [rows, V] buffer; this kernel turns each row
// into its statistics and, where asked, the logits' gradient written in
// place; two more GEMMs carry that gradient to hidden and lm_head. The
// design of Liger-Kernel's FusedLinearCrossEntropy (one chunk of logits in
// memory, never [N, V]).
//
// One block per row r, of any size that is a multiple of 32 up to 1024 (the
// launcher uses 1024). Modes:
// - TLP_STATS: stats[3 r ..] = (log p(t), lse, entropy) (the forward of
//   TokenLogprobsOp).
// - TLP_FOLDED: coef[2 r ..] = (t as float, w), stats[4 r ..] = (log p(t),
//   lse, entropy, w log p(t)),
//   and dz = (w / T) (1[v = t] - p) (the loss folded into the forward,
//   kernels::logprobs::weighted_logprob_sum).
// - TLP_GRAD: coef[4 r ..] = (t as float, lse, g_logp, g_lse) (the rows of
//   TokenLogprobsBackward), dz = (g_logp 1[v = t] + (g_lse - g_logp) p) / T
//   with p = exp(z - lse) from the given lse; no stats.
// dz is written as T over the row's own f32 logits: element v of row r at
// ((T *)z)[r * ld + v] with ld = V * 4 / sizeof(T) (V for f32, 2V for bf16,
// the first half of the row's bytes), the layout the next GEMMs read. A row
// whose target is not in 0..V (a whole number, for the float-carried ones)
// gets a NaN log-prob and no gradient. `tgt` is read in TLP_STATS only.
#include "common.cuh"

#define TLP_STATS 0
#define TLP_FOLDED 1
#define TLP_GRAD 2

// Online soft-max state (max m, s = sum e^(z - m), u = sum e^(z - m) z) of
// the block's row, merged over the warps' lanes and then the warps in a
// fixed order; every thread gets it. All threads must call it.
__device__ __forceinline__ void block_softmax_merge(float &m, float &s, float &u) {
  __shared__ float wm[32], ws[32], wu[32];
  for (int off = 16; off > 0; off >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
    const float u2 = __shfl_xor_sync(0xffffffffu, u, off);
    softmax_merge(m, s, u, m2, s2, u2);
  }
  const int lane = threadIdx.x % 32, wid = threadIdx.x / 32, nw = blockDim.x / 32;
  __syncthreads();  // the arrays may still be read by a previous call
  if (lane == 0) { wm[wid] = m; ws[wid] = s; wu[wid] = u; }
  __syncthreads();
  m = -INFINITY; s = 0.0f; u = 0.0f;
  for (int k = 0; k < nw; ++k) softmax_merge(m, s, u, wm[k], ws[k], wu[k]);
}

template <typename T>
__device__ void rows_kernel(float *z, int V, float inv_t, const uint32_t *tgt, const float *coef,
                            int mode, float *stats) {
  const int r = blockIdx.x;
  float *zr = z + (int64_t)r * V;
  // The target and the gradient's coefficients: dz = a 1[v = t] + b p.
  int t;
  float lse_given = 0.0f, a = 0.0f, b = 0.0f, wgt = 0.0f;
  if (mode == TLP_STATS) {
    t = tgt[r] < (uint32_t)V ? (int)tgt[r] : -1;
  } else {
    const float *x = coef + (mode == TLP_GRAD ? 4 : 2) * (int64_t)r;
    const float tf = x[0];
    t = (tf >= 0.0f && tf < (float)V && tf == floorf(tf)) ? (int)tf : -1;
    if (mode == TLP_GRAD) {
      lse_given = x[1];
      a = x[2] * inv_t;
      b = (x[3] - x[2]) * inv_t;
    } else {
      wgt = x[1];
      a = wgt * inv_t;
      b = -a;
    }
  }
  float lse = lse_given;
  if (mode != TLP_GRAD) {
    float m = -INFINITY, s = 0.0f, u = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) softmax_merge(m, s, u, zr[v], 1.0f, zr[v]);
    // Read before any thread of the block overwrites the row (the merge
    // below synchronizes).
    const float zt = t >= 0 ? zr[t] : NAN;
    block_softmax_merge(m, s, u);
    lse = m + logf(s);
    if (threadIdx.x == 0) {
      const float logp = t >= 0 ? zt - lse : NAN;
      if (mode == TLP_STATS) {
        float *o = stats + 3 * (int64_t)r;
        o[0] = logp; o[1] = lse; o[2] = lse - u / s;
      } else {
        float *o = stats + 4 * (int64_t)r;
        o[0] = logp; o[1] = lse; o[2] = lse - u / s; o[3] = wgt * logp;
      }
    }
  }
  if (mode == TLP_STATS) return;
  if (t < 0) { a = 0.0f; b = 0.0f; }
  // Tile by tile: every thread reads its logit, then (after a barrier) all
  // write their gradients. A bf16 write lands in bytes [2v, 2v + 2) of the
  // row, inside logits this tile or an earlier one already read.
  T *dr = (T *)z + (int64_t)r * V * (int64_t)(sizeof(float) / sizeof(T));
  for (int v0 = 0; v0 < V; v0 += blockDim.x) {
    const int v = v0 + threadIdx.x;
    float d = 0.0f;
    if (v < V) d = b * expf(zr[v] - lse) + (v == t ? a : 0.0f);
    __syncthreads();
    if (v < V) dr[v] = from_f32<T>(d);
  }
}

#define TLP_KERNELS(T, SUF)                                                                  \
  extern "C" __global__ void tlp_rows_##SUF(float *z, int V, float inv_t, const uint32_t *tgt, \
                                            const float *coef, int mode, float *stats) {      \
    rows_kernel<T>(z, V, inv_t, tgt, coef, mode, stats);                                      \
  }                                                                                           \
  extern "C" __global__ void tlp_cast_##SUF(const float *src, int64_t n, T *dst) {           \
    cast_out<T>(src, n, dst);                                                                 \
  }

TLP_KERNELS(float, f32)
TLP_KERNELS(__nv_bfloat16, bf16)
