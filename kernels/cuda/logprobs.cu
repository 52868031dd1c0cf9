// Fused token log-probs: per token n, with z = h W^T / T (never written as
// [N, V] logits), stats[n] = (z[n, t[n]] - lse[n], lse[n], entropy[n]), the
// contract of kernels::logprobs::TokenLogprobsOp. Forward: tiles of 64 tokens
// x 64 vocabulary rows, an online log-sum-exp (and sum of p z for the
// entropy) per token over each block's share of the vocabulary (split-V),
// then a combine. Backward (TokenLogprobsBackward, per-token aux rows
// (target, lse, g_logp, g_lse)): per vocabulary chunk, recompute the chunk's
// logits into dz = (g_logp onehot + (g_lse - g_logp) softmax) / T ([N, C] f32
// scratch), then grad_h += dz W_chunk and grad_W_chunk = dz^T h.
// All accumulation in f32; T is float or __nv_bfloat16.
#include "common.cuh"

// Per (token, split): running max, sum of exp and sum of exp * z over the
// split's vocabulary tiles, and z at the target (written by the one thread
// that meets it).
template <typename T>
__device__ void fwd_partial(const T *h, const T *w, const uint32_t *tgt, int N, int V, int D,
                            float inv_t, int tiles_per_split, float *part, float *zt) {
  const int m0 = blockIdx.x * TILE_M, split = blockIdx.y;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const Operand<T> A{h, D, 1, N, D};  // (token, d)
  const Operand<T> B{w, 1, D, D, V};  // (d, vocab) = w[vocab * D + d]
  float run_m[4], run_s[4], run_u[4];
  uint32_t tg[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = m0 + ty + 16 * i;
    run_m[i] = -INFINITY;
    run_s[i] = 0.0f;
    run_u[i] = 0.0f;
    tg[i] = row < N ? tgt[row] : 0xffffffffu;
  }
  const int n_tiles = (V + TILE_N - 1) / TILE_N;
  const int t_end = min(n_tiles, (split + 1) * tiles_per_split);
  for (int tile = split * tiles_per_split; tile < t_end; ++tile) {
    const int n0 = tile * TILE_N;
    float acc[4][4];
    zero_acc(acc);
    gemm_tile<T, T, true, true>(A, B, D, m0, n0, acc);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = m0 + ty + 16 * i;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int v = n0 + tx + 16 * j;
        if (v >= V) continue;
        const float z = acc[i][j] * inv_t;
        softmax_merge(run_m[i], run_s[i], run_u[i], z, 1.0f, z);
        if (row < N && (uint32_t)v == tg[i]) zt[row] = z;
      }
    }
  }
  // The 16 threads of a row (same ty) are one half-warp: merge by shuffles.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float m = run_m[i], s = run_s[i], u = run_u[i];
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
      const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
      const float u2 = __shfl_xor_sync(0xffffffffu, u, off);
      softmax_merge(m, s, u, m2, s2, u2);
    }
    const int row = m0 + ty + 16 * i;
    if (tx == 0 && row < N) {
      float *p = part + ((int64_t)split * N + row) * 3;
      p[0] = m;
      p[1] = s;
      p[2] = u;
    }
  }
}

// Merges the splits into stats[n] = (logp, lse, entropy) (logp NaN for an
// out-of-range target).
extern "C" __global__ void tlp_fwd_combine(const float *part, const float *zt,
                                           const uint32_t *tgt, int N, int V, int splits,
                                           float *stats) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  float m = -INFINITY, s = 0.0f, u = 0.0f;
  for (int k = 0; k < splits; ++k) {
    const float *p = part + ((int64_t)k * N + n) * 3;
    softmax_merge(m, s, u, p[0], p[1], p[2]);
  }
  const float lse = m + logf(s);
  stats[3 * n] = tgt[n] < (uint32_t)V ? zt[n] - lse : NAN;
  stats[3 * n + 1] = lse;
  stats[3 * n + 2] = lse - u / s;
}

// dz[n, c] = (g_logp [v == t] + (g_lse - g_logp) p[n, v]) / T at v = v0 + c,
// for the vocabulary chunk [v0, v0 + C); aux[n] = (target as float, lse,
// g_logp, g_lse). Rows whose target is not a valid id get 0.
template <typename T>
__device__ void bwd_dz(const T *h, const T *w, const float *aux, int N, int V, int D, float inv_t,
                       int v0, int C, float *dz) {
  const int m0 = blockIdx.x * TILE_M, n0 = v0 + blockIdx.y * TILE_N;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const Operand<T> A{h, D, 1, N, D};
  const Operand<T> B{w, 1, D, D, V};
  float acc[4][4];
  zero_acc(acc);
  gemm_tile<T, T, true, true>(A, B, D, m0, n0, acc);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = m0 + ty + 16 * i;
    if (row >= N) continue;
    const float *a = aux + 4 * (int64_t)row;
    const float tf = a[0], lse = a[1], g_lp = a[2], g_lse = a[3];
    const bool valid = tf >= 0.0f && tf < (float)V && tf == floorf(tf);
    const int t = valid ? (int)tf : -1;
    const float coef = (g_lse - g_lp) * inv_t;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int v = n0 + tx + 16 * j;
      if (v >= v0 + C) continue;
      const float p = expf(acc[i][j] * inv_t - lse);
      const float d = valid ? p * coef + (v == t ? g_lp * inv_t : 0.0f) : 0.0f;
      dz[(int64_t)row * C + (v - v0)] = d;
    }
  }
}

// grad_h[N, D] (f32) += dz[N, C] W[v0 .. v0 + C, D].
template <typename T>
__device__ void bwd_grad_h(const float *dz, const T *w, int N, int D, int v0, int C, float *gh) {
  const int m0 = blockIdx.x * TILE_M, n0 = blockIdx.y * TILE_N;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const Operand<float> A{dz, C, 1, N, C};               // (token, c)
  const Operand<T> B{w + (int64_t)v0 * D, D, 1, C, D};  // (c, d)
  float acc[4][4];
  zero_acc(acc);
  gemm_tile<float, T, true, false>(A, B, C, m0, n0, acc);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = m0 + ty + 16 * i;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = n0 + tx + 16 * j;
      if (row < N && col < D) gh[(int64_t)row * D + col] += acc[i][j];
    }
  }
}

// grad_W[v0 + c, :] = sum_n dz[n, c] h[n, :] (each row written once).
template <typename T>
__device__ void bwd_grad_w(const float *dz, const T *h, int N, int D, int v0, int C, T *gw) {
  const int m0 = blockIdx.x * TILE_M, n0 = blockIdx.y * TILE_N;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const Operand<float> A{dz, 1, C, C, N};  // (c, token) = dz[token * C + c]
  const Operand<T> B{h, D, 1, N, D};       // (token, d)
  float acc[4][4];
  zero_acc(acc);
  gemm_tile<float, T, false, false>(A, B, N, m0, n0, acc);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = m0 + ty + 16 * i;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = n0 + tx + 16 * j;
      if (row < C && col < D) gw[(int64_t)(v0 + row) * D + col] = from_f32<T>(acc[i][j]);
    }
  }
}

#define TLP_KERNELS(T, SUF)                                                                      \
  extern "C" __global__ void tlp_fwd_partial_##SUF(const T *h, const T *w, const uint32_t *tgt, \
                                                   int N, int V, int D, float inv_t,              \
                                                   int tiles_per_split, float *part, float *zt) { \
    fwd_partial<T>(h, w, tgt, N, V, D, inv_t, tiles_per_split, part, zt);                         \
  }                                                                                               \
  extern "C" __global__ void tlp_bwd_dz_##SUF(const T *h, const T *w, const float *aux, int N,   \
                                              int V, int D, float inv_t, int v0, int C,           \
                                              float *dz) {                                        \
    bwd_dz<T>(h, w, aux, N, V, D, inv_t, v0, C, dz);                                              \
  }                                                                                               \
  extern "C" __global__ void tlp_bwd_grad_h_##SUF(const float *dz, const T *w, int N, int D,     \
                                                  int v0, int C, float *gh) {                     \
    bwd_grad_h<T>(dz, w, N, D, v0, C, gh);                                                        \
  }                                                                                               \
  extern "C" __global__ void tlp_bwd_grad_w_##SUF(const float *dz, const T *h, int N, int D,     \
                                                  int v0, int C, T *gw) {                         \
    bwd_grad_w<T>(dz, h, N, D, v0, C, gw);                                                        \
  }                                                                                               \
  extern "C" __global__ void tlp_cast_##SUF(const float *src, int64_t n, T *dst) {               \
    cast_out<T>(src, n, dst);                                                                     \
  }

TLP_KERNELS(float, f32)
TLP_KERNELS(__nv_bfloat16, bf16)
