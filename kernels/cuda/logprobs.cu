// Fused token log-probs: logprob[n] = z[n, t[n]] - lse_v z[n, v] with
// z = h W^T / T, never writing the [N, V] logits. Forward: tiles of 64 tokens
// x 64 vocabulary rows, an online log-sum-exp per token over each block's
// share of the vocabulary (split-V), then a combine. Backward: per vocabulary
// chunk, recompute the chunk's logits into dz = g (onehot - softmax) / T
// ([N, C] f32 scratch), then grad_h += dz W_chunk and grad_W_chunk = dz^T h.
// All accumulation in f32; T is float or __nv_bfloat16.
#include "common.cuh"

// Per (token, split): running max and sum of exp over the split's vocab
// tiles, and z at the target (written by the one thread that meets it).
template <typename T>
__device__ void fwd_partial(const T *h, const T *w, const uint32_t *tgt, int N, int V, int D,
                            float inv_t, int tiles_per_split, float *part_m, float *part_s,
                            float *zt) {
  const int m0 = blockIdx.x * TILE_M, split = blockIdx.y;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const Operand<T> A{h, D, 1, N, D};  // (token, d)
  const Operand<T> B{w, 1, D, D, V};  // (d, vocab) = w[vocab * D + d]
  float run_m[4], run_s[4];
  uint32_t tg[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = m0 + ty + 16 * i;
    run_m[i] = -INFINITY;
    run_s[i] = 0.0f;
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
        if (z > run_m[i]) {
          run_s[i] = run_s[i] * expf(run_m[i] - z) + 1.0f;
          run_m[i] = z;
        } else {
          run_s[i] += expf(z - run_m[i]);
        }
        if (row < N && (uint32_t)v == tg[i]) zt[row] = z;
      }
    }
  }
  // The 16 threads of a row (same ty) are one half-warp: merge by shuffles.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float m = run_m[i], s = run_s[i];
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
      const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
      lse_merge(m, s, m2, s2);
    }
    const int row = m0 + ty + 16 * i;
    if (tx == 0 && row < N) {
      part_m[(int64_t)split * N + row] = m;
      part_s[(int64_t)split * N + row] = s;
    }
  }
}

// Merges the splits: lse[n] and logprob[n] (NaN for an out-of-range target).
extern "C" __global__ void tlp_fwd_combine(const float *part_m, const float *part_s,
                                           const float *zt, const uint32_t *tgt, int N, int V,
                                           int splits, float *logprob, float *lse) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  float m = -INFINITY, s = 0.0f;
  for (int k = 0; k < splits; ++k) lse_merge(m, s, part_m[(int64_t)k * N + n], part_s[(int64_t)k * N + n]);
  const float l = m + logf(s);
  lse[n] = l;
  logprob[n] = tgt[n] < (uint32_t)V ? zt[n] - l : NAN;
}

// lse[n] = z[n, t[n]] - logprob[n], from the forward's output (one warp per
// token), so the backward needs no saved state beyond the op's result.
template <typename T>
__device__ void lse_from_logprob(const T *h, const T *w, const uint32_t *tgt,
                                 const float *logprob, int N, int V, int D, float inv_t,
                                 float *lse) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (warp >= N) return;
  const uint32_t t = tgt[warp];
  if (t >= (uint32_t)V) {
    if (lane == 0) lse[warp] = 0.0f;
    return;
  }
  float acc = 0.0f;
  for (int k = lane; k < D; k += 32)
    acc = fmaf(to_f32(h[(int64_t)warp * D + k]), to_f32(w[(int64_t)t * D + k]), acc);
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) lse[warp] = acc * inv_t - logprob[warp];
}

// dz[n, c] = g[n] (onehot(t[n])[v0 + c] - softmax(z[n])[v0 + c]) / T for the
// vocabulary chunk [v0, v0 + C); rows with an out-of-range target get 0.
template <typename T>
__device__ void bwd_dz(const T *h, const T *w, const uint32_t *tgt, const float *lse,
                       const float *g, int N, int V, int D, float inv_t, int v0, int C, float *dz) {
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
    const uint32_t t = tgt[row];
    const bool valid = t < (uint32_t)V;
    const float l = lse[row], gr = g[row];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int v = n0 + tx + 16 * j;
      if (v >= v0 + C) continue;
      const float p = expf(acc[i][j] * inv_t - l);
      const float d = valid ? gr * (((uint32_t)v == t ? 1.0f : 0.0f) - p) * inv_t : 0.0f;
      dz[(int64_t)row * C + (v - v0)] = d;
    }
  }
}

// grad_h[N, D] (f32) += dz[N, C] W[v0 .. v0 + C, D].
template <typename T>
__device__ void bwd_grad_h(const float *dz, const T *w, int N, int D, int v0, int C, float *gh) {
  const int m0 = blockIdx.x * TILE_M, n0 = blockIdx.y * TILE_N;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const Operand<float> A{dz, C, 1, N, C};             // (token, c)
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
  extern "C" __global__ void tlp_fwd_partial_##SUF(                                              \
      const T *h, const T *w, const uint32_t *tgt, int N, int V, int D, float inv_t,              \
      int tiles_per_split, float *part_m, float *part_s, float *zt) {                             \
    fwd_partial<T>(h, w, tgt, N, V, D, inv_t, tiles_per_split, part_m, part_s, zt);               \
  }                                                                                               \
  extern "C" __global__ void tlp_lse_from_logprob_##SUF(const T *h, const T *w,                  \
                                                        const uint32_t *tgt, const float *lp,     \
                                                        int N, int V, int D, float inv_t,         \
                                                        float *lse) {                             \
    lse_from_logprob<T>(h, w, tgt, lp, N, V, D, inv_t, lse);                                      \
  }                                                                                               \
  extern "C" __global__ void tlp_bwd_dz_##SUF(const T *h, const T *w, const uint32_t *tgt,       \
                                              const float *lse, const float *g, int N, int V,     \
                                              int D, float inv_t, int v0, int C, float *dz) {     \
    bwd_dz<T>(h, w, tgt, lse, g, N, V, D, inv_t, v0, C, dz);                                      \
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
