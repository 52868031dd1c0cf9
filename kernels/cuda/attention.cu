// Causal grouped-query attention in memory linear in the sequence length,
// FlashAttention-2's scheme, with the contract of
// kernels::attention::AttentionOp (CPU path in kernels/src/attention/cpu.rs):
//
//   q [b, heads, t, D], k and v [b, kv_heads, s, D] (s >= t; any strides of
//   the first three dimensions, the last contiguous), scores scaled by
//   `scale`; out [b, t, heads * D] (heads merged), lse [b, heads, t] f32.
//   Query i of row r sees key j when its position is < 0 (padding: it sees
//   every key) or when the key's position is >= 0 and <= the query's and both
//   lie in the same segment (positions and segment ids per slot, row-major
//   [b, t] and [b, s], int64).
//
// Query rows are folded per kv head as on the CPU: the `groups` query heads
// of kv head g form groups * t rows (head-major, row f is head
// g * groups + f / t, query f % t), so a decoding step's few queries still
// fill a tile and K/V tiles are shared by the group. Tiles are B x B (query
// rows x keys) with B = 2048 / D (32 for D = 64, 16 for D = 128) so every
// kernel's shared tiles stay under the 48 KiB of static shared memory; 128
// threads per block; f32 accumulation, inputs float or __nv_bfloat16. A
// (query tile, key tile) pair no query of which sees any key is skipped (as
// cpu.rs's `pair`: positions and segment ranges).
//
// - attn_fwd: one block per (query tile, row x kv head), an online soft-max
//   over the key tiles; writes out and lse (-inf and a zero output for a
//   query that sees no key).
// - attn_bwd_delta: D = rowsum(dO * O) per (row, head, query), lse's layout.
// - attn_bwd_dkdv: one block per (key tile, row x kv head), looping over the
//   query tiles: dV = P^T dO, dK = scale dS^T Q with P = exp(S - L) and
//   dS = P (dO V^T - D).
// - attn_bwd_dq: one block per (query tile, row x kv head), looping over the
//   key tiles: dQ = scale dS K.
// Every output element is written by one thread of one block: no atomics,
// the same bits on every run. Nothing of size t x s exists.
#include "common.cuh"

#define ATTN_THREADS 128
// Position of a slot past the end (a query row past groups * t, a key past
// s): it sees, and is seen by, nothing.
#define ATTN_NO_SLOT INT64_MIN

// Rows (query rows or keys) per tile for head dim D.
template <int D> struct AttnTile {
  static constexpr int B = 2048 / D;
  // Score pairs and [B, D] tile elements per thread.
  static constexpr int PAIRS = B * B / ATTN_THREADS;
  static constexpr int ELEMS = B * D / ATTN_THREADS;
};

// Shapes and strides of one call (strides in elements, of q, k and v's
// first three dimensions).
struct AttnShape {
  int heads, kv_heads, t, s;
  int64_t q0, q1, q2, k0, k1, k2, v0, v1, v2;
  __device__ __forceinline__ int groups() const { return heads / kv_heads; }
  __device__ __forceinline__ int folded() const { return groups() * t; }
};

// Per-slot positions and segment ids, row-major [b, t] and [b, s].
struct AttnSlots {
  const int64_t *qpos, *kpos, *qseg, *kseg;
};

__device__ __forceinline__ bool attn_sees(int64_t qp, int64_t qg, int64_t kp, int64_t kg) {
  if (qp == ATTN_NO_SLOT || kp == ATTN_NO_SLOT) return false;
  if (qp < 0) return true;
  return kp >= 0 && kp <= qp && qg == kg;
}

// What a tile of slots holds, for skipping (as cpu.rs's BlockStats).
struct AttnStats {
  bool any_pad, any_valid;
  int64_t min_pos, max_pos, min_seg, max_seg;
};

template <int B> __device__ AttnStats attn_stats(const int64_t *pos, const int64_t *seg) {
  AttnStats st{false, false, INT64_MAX, INT64_MIN, INT64_MAX, INT64_MIN};
  for (int n = 0; n < B; ++n) {
    if (pos[n] == ATTN_NO_SLOT) continue;
    if (pos[n] < 0) { st.any_pad = true; continue; }
    st.any_valid = true;
    st.min_pos = pos[n] < st.min_pos ? pos[n] : st.min_pos;
    st.max_pos = pos[n] > st.max_pos ? pos[n] : st.max_pos;
    st.min_seg = seg[n] < st.min_seg ? seg[n] : st.min_seg;
    st.max_seg = seg[n] > st.max_seg ? seg[n] : st.max_seg;
  }
  return st;
}

// Whether no query of tile q sees any key of tile k.
__device__ __forceinline__ bool attn_skipped(const AttnStats &q, const AttnStats &k) {
  if (q.any_pad) return false;
  return !q.any_valid || !k.any_valid || k.min_pos > q.max_pos || k.max_seg < q.min_seg || k.min_seg > q.max_seg;
}

// (head, query) of folded row f of kv head g.
__device__ __forceinline__ void attn_unfold(const AttnShape &sh, int g, int f, int &h, int &i) {
  h = g * sh.groups() + f / sh.t;
  i = f % sh.t;
}

// dst[r * ld + d] = q at folded row f0 + r (0 past the end), r < B.
template <typename T, int D, int B>
__device__ void attn_load_q(float *dst, int ld, const T *q, const AttnShape &sh, int b, int g, int f0) {
  for (int e = threadIdx.x; e < B * D; e += ATTN_THREADS) {
    const int r = e / D, d = e % D, f = f0 + r;
    float x = 0.0f;
    if (f < sh.folded()) {
      int h, i;
      attn_unfold(sh, g, f, h, i);
      x = to_f32(q[b * sh.q0 + h * sh.q1 + i * sh.q2 + d]);
    }
    dst[r * ld + d] = x;
  }
}

// dst[r * ld + d] = the merged-heads [b, t, heads * D] tensor x at folded
// row f0 + r (0 past the end).
template <typename T, int D, int B>
__device__ void attn_load_merged(float *dst, int ld, const T *x, const AttnShape &sh, int b, int g, int f0) {
  for (int e = threadIdx.x; e < B * D; e += ATTN_THREADS) {
    const int r = e / D, d = e % D, f = f0 + r;
    float y = 0.0f;
    if (f < sh.folded()) {
      int h, i;
      attn_unfold(sh, g, f, h, i);
      y = to_f32(x[(((int64_t)b * sh.t + i) * sh.heads + h) * D + d]);
    }
    dst[r * ld + d] = y;
  }
}

// dst[c * ld + d] = keys j0 + c of kv head g of x (k or v, strides s0..s2;
// 0 past s).
template <typename T, int D, int B>
__device__ void attn_load_keys(float *dst, int ld, const T *x, int64_t s0, int64_t s1, int64_t s2, int s, int b,
                               int g, int j0) {
  for (int e = threadIdx.x; e < B * D; e += ATTN_THREADS) {
    const int c = e / D, d = e % D, j = j0 + c;
    dst[c * ld + d] = j < s ? to_f32(x[b * s0 + g * s1 + j * s2 + d]) : 0.0f;
  }
}

// Slot (position, segment) of folded row f / key j of row b.
__device__ __forceinline__ void attn_query_slot(const AttnSlots &sl, const AttnShape &sh, int b, int g, int f,
                                                int64_t &pos, int64_t &seg) {
  if (f >= sh.folded()) { pos = ATTN_NO_SLOT; seg = 0; return; }
  int h, i;
  attn_unfold(sh, g, f, h, i);
  pos = sl.qpos[(int64_t)b * sh.t + i];
  seg = sl.qseg[(int64_t)b * sh.t + i];
}

__device__ __forceinline__ void attn_key_slot(const AttnSlots &sl, const AttnShape &sh, int b, int j, int64_t &pos,
                                              int64_t &seg) {
  if (j >= sh.s) { pos = ATTN_NO_SLOT; seg = 0; return; }
  pos = sl.kpos[(int64_t)b * sh.s + j];
  seg = sl.kseg[(int64_t)b * sh.s + j];
}

template <int D> __device__ __forceinline__ float attn_dot(const float *a, const float *b) {
  float acc = 0.0f;
#pragma unroll 16
  for (int d = 0; d < D; ++d) acc = fmaf(a[d], b[d], acc);
  return acc;
}

// Offset of (b, h, i) in lse's [b, heads, t] layout.
__device__ __forceinline__ int64_t attn_row(const AttnShape &sh, int b, int h, int i) {
  return ((int64_t)b * sh.heads + h) * sh.t + i;
}

template <typename T, int D>
__device__ void attn_fwd(const T *q, const T *k, const T *v, AttnSlots sl, AttnShape sh, float scale, T *out,
                         float *lse) {
  constexpr int B = AttnTile<D>::B, PAIRS = AttnTile<D>::PAIRS, ELEMS = AttnTile<D>::ELEMS;
  __shared__ float Qs[B][D];
  __shared__ float KVs[B][D + 1];  // K, then V of the current key tile
  __shared__ float Ps[B][B + 1];   // scores, then probabilities
  __shared__ int64_t qp[B], qg[B], kp[B], kg[B];
  __shared__ float row_m[B], row_l[B], row_alpha[B];
  const int tid = threadIdx.x, f0 = blockIdx.x * B;
  const int b = blockIdx.y / sh.kv_heads, g = blockIdx.y % sh.kv_heads;
  attn_load_q<T, D, B>(&Qs[0][0], D, q, sh, b, g, f0);
  if (tid < B) {
    attn_query_slot(sl, sh, b, g, f0 + tid, qp[tid], qg[tid]);
    row_m[tid] = -INFINITY;
    row_l[tid] = 0.0f;
  }
  float acc[ELEMS];
#pragma unroll
  for (int m = 0; m < ELEMS; ++m) acc[m] = 0.0f;
  __syncthreads();
  const AttnStats qst = attn_stats<B>(qp, qg);
  for (int j0 = 0; j0 < sh.s; j0 += B) {
    __syncthreads();  // the previous tile's readers are done
    if (tid < B) attn_key_slot(sl, sh, b, j0 + tid, kp[tid], kg[tid]);
    attn_load_keys<T, D, B>(&KVs[0][0], D + 1, k, sh.k0, sh.k1, sh.k2, sh.s, b, g, j0);
    __syncthreads();
    if (attn_skipped(qst, attn_stats<B>(kp, kg))) continue;  // uniform over the block
#pragma unroll
    for (int n = 0; n < PAIRS; ++n) {
      const int p = tid + n * ATTN_THREADS, r = p / B, c = p % B;
      Ps[r][c] = attn_sees(qp[r], qg[r], kp[c], kg[c]) ? scale * attn_dot<D>(Qs[r], KVs[c]) : -INFINITY;
    }
    __syncthreads();
    // One thread per query row updates its running max and sum while all
    // threads bring in V over K.
    if (tid < B) {
      const int r = tid;
      float mx = row_m[r];
      for (int c = 0; c < B; ++c) mx = fmaxf(mx, Ps[r][c]);
      float alpha = 1.0f;
      if (mx == -INFINITY) {
        for (int c = 0; c < B; ++c) Ps[r][c] = 0.0f;
      } else {
        float sum = 0.0f;
        for (int c = 0; c < B; ++c) {
          const float e = expf(Ps[r][c] - mx);
          Ps[r][c] = e;
          sum += e;
        }
        alpha = expf(row_m[r] - mx);
        row_l[r] = row_l[r] * alpha + sum;
        row_m[r] = mx;
      }
      row_alpha[r] = alpha;
    }
    attn_load_keys<T, D, B>(&KVs[0][0], D + 1, v, sh.v0, sh.v1, sh.v2, sh.s, b, g, j0);
    __syncthreads();
#pragma unroll
    for (int m = 0; m < ELEMS; ++m) {
      const int e = tid + m * ATTN_THREADS, r = e / D, d = e % D;
      float a = acc[m] * row_alpha[r];
      for (int c = 0; c < B; ++c) a = fmaf(Ps[r][c], KVs[c][d], a);
      acc[m] = a;
    }
  }
  __syncthreads();
#pragma unroll
  for (int m = 0; m < ELEMS; ++m) {
    const int e = tid + m * ATTN_THREADS, r = e / D, d = e % D, f = f0 + r;
    if (f >= sh.folded()) continue;
    int h, i;
    attn_unfold(sh, g, f, h, i);
    const float l = row_l[r];
    out[(((int64_t)b * sh.t + i) * sh.heads + h) * D + d] = from_f32<T>(l > 0.0f ? acc[m] / l : 0.0f);
  }
  if (tid < B && f0 + tid < sh.folded()) {
    int h, i;
    attn_unfold(sh, g, f0 + tid, h, i);
    lse[attn_row(sh, b, h, i)] = row_l[tid] > 0.0f ? row_m[tid] + logf(row_l[tid]) : -INFINITY;
  }
}

// delta[(b, h, i)] = sum_d out[b, i, h, d] dout[b, i, h, d], for n rows of
// lse's layout.
template <typename T>
__device__ void attn_bwd_delta(const T *out, const T *dout, int n, int heads, int t, int D, float *delta) {
  const int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= n) return;
  const int64_t b = row / ((int64_t)heads * t), h = (row / t) % heads, i = row % t;
  const int64_t at = ((b * t + i) * heads + h) * D;
  float acc = 0.0f;
  for (int d = 0; d < D; ++d) acc = fmaf(to_f32(out[at + d]), to_f32(dout[at + d]), acc);
  delta[row] = acc;
}

// lse and delta of folded row f of kv head g (-inf and 0 past the end).
__device__ __forceinline__ void attn_row_stats(const AttnShape &sh, const float *lse, const float *delta, int b, int g,
                                               int f, float &l, float &dl) {
  if (f >= sh.folded()) { l = -INFINITY; dl = 0.0f; return; }
  int h, i;
  attn_unfold(sh, g, f, h, i);
  l = lse[attn_row(sh, b, h, i)];
  dl = delta[attn_row(sh, b, h, i)];
}

// P = exp(scale q.k - lse) where the query sees the key and has a finite lse.
template <int D>
__device__ __forceinline__ float attn_prob(const float *qrow, const float *krow, bool seen, float l, float scale) {
  return (seen && l != -INFINITY) ? expf(scale * attn_dot<D>(qrow, krow) - l) : 0.0f;
}

template <typename T, int D>
__device__ void attn_bwd_dkdv(const T *q, const T *k, const T *v, const T *dout, const float *lse, const float *delta,
                              AttnSlots sl, AttnShape sh, float scale, T *dk, T *dv) {
  constexpr int B = AttnTile<D>::B, PAIRS = AttnTile<D>::PAIRS, ELEMS = AttnTile<D>::ELEMS;
  __shared__ float Ks[B][D + 1], Vs[B][D + 1], Qs[B][D], dOs[B][D];
  __shared__ float Ps[B][B + 1];  // P, then dS
  __shared__ int64_t qp[B], qg[B], kp[B], kg[B];
  __shared__ float row_lse[B], row_delta[B];
  const int tid = threadIdx.x, j0 = blockIdx.x * B;
  const int b = blockIdx.y / sh.kv_heads, g = blockIdx.y % sh.kv_heads;
  attn_load_keys<T, D, B>(&Ks[0][0], D + 1, k, sh.k0, sh.k1, sh.k2, sh.s, b, g, j0);
  attn_load_keys<T, D, B>(&Vs[0][0], D + 1, v, sh.v0, sh.v1, sh.v2, sh.s, b, g, j0);
  if (tid < B) attn_key_slot(sl, sh, b, j0 + tid, kp[tid], kg[tid]);
  float dk_acc[ELEMS], dv_acc[ELEMS];
#pragma unroll
  for (int m = 0; m < ELEMS; ++m) dk_acc[m] = dv_acc[m] = 0.0f;
  __syncthreads();
  const AttnStats kst = attn_stats<B>(kp, kg);
  for (int f0 = 0; f0 < sh.folded(); f0 += B) {
    __syncthreads();  // the previous tile's readers are done
    attn_load_q<T, D, B>(&Qs[0][0], D, q, sh, b, g, f0);
    attn_load_merged<T, D, B>(&dOs[0][0], D, dout, sh, b, g, f0);
    if (tid < B) {
      attn_query_slot(sl, sh, b, g, f0 + tid, qp[tid], qg[tid]);
      attn_row_stats(sh, lse, delta, b, g, f0 + tid, row_lse[tid], row_delta[tid]);
    }
    __syncthreads();
    if (attn_skipped(attn_stats<B>(qp, qg), kst)) continue;  // uniform over the block
    float pr[PAIRS];
#pragma unroll
    for (int n = 0; n < PAIRS; ++n) {
      const int p = tid + n * ATTN_THREADS, r = p / B, c = p % B;
      pr[n] = attn_prob<D>(Qs[r], Ks[c], attn_sees(qp[r], qg[r], kp[c], kg[c]), row_lse[r], scale);
      Ps[r][c] = pr[n];
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < ELEMS; ++m) {
      const int e = tid + m * ATTN_THREADS, c = e / D, d = e % D;
      float a = 0.0f;
      for (int r = 0; r < B; ++r) a = fmaf(Ps[r][c], dOs[r][d], a);
      dv_acc[m] += a;
    }
    float ds[PAIRS];
#pragma unroll
    for (int n = 0; n < PAIRS; ++n) {
      const int p = tid + n * ATTN_THREADS, r = p / B, c = p % B;
      ds[n] = pr[n] == 0.0f ? 0.0f : pr[n] * (attn_dot<D>(dOs[r], Vs[c]) - row_delta[r]);
    }
    __syncthreads();  // dV's readers of P are done
#pragma unroll
    for (int n = 0; n < PAIRS; ++n) {
      const int p = tid + n * ATTN_THREADS;
      Ps[p / B][p % B] = ds[n];
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < ELEMS; ++m) {
      const int e = tid + m * ATTN_THREADS, c = e / D, d = e % D;
      float a = 0.0f;
      for (int r = 0; r < B; ++r) a = fmaf(Ps[r][c], Qs[r][d], a);
      dk_acc[m] += a;
    }
  }
#pragma unroll
  for (int m = 0; m < ELEMS; ++m) {
    const int e = tid + m * ATTN_THREADS, c = e / D, d = e % D, j = j0 + c;
    if (j >= sh.s) continue;
    const int64_t at = (((int64_t)b * sh.kv_heads + g) * sh.s + j) * D + d;
    dk[at] = from_f32<T>(scale * dk_acc[m]);
    dv[at] = from_f32<T>(dv_acc[m]);
  }
}

template <typename T, int D>
__device__ void attn_bwd_dq(const T *q, const T *k, const T *v, const T *dout, const float *lse, const float *delta,
                            AttnSlots sl, AttnShape sh, float scale, T *dq) {
  constexpr int B = AttnTile<D>::B, PAIRS = AttnTile<D>::PAIRS, ELEMS = AttnTile<D>::ELEMS;
  __shared__ float Ks[B][D + 1], Vs[B][D + 1], Qs[B][D], dOs[B][D];
  __shared__ float Ps[B][B + 1];  // dS
  __shared__ int64_t qp[B], qg[B], kp[B], kg[B];
  __shared__ float row_lse[B], row_delta[B];
  const int tid = threadIdx.x, f0 = blockIdx.x * B;
  const int b = blockIdx.y / sh.kv_heads, g = blockIdx.y % sh.kv_heads;
  attn_load_q<T, D, B>(&Qs[0][0], D, q, sh, b, g, f0);
  attn_load_merged<T, D, B>(&dOs[0][0], D, dout, sh, b, g, f0);
  if (tid < B) {
    attn_query_slot(sl, sh, b, g, f0 + tid, qp[tid], qg[tid]);
    attn_row_stats(sh, lse, delta, b, g, f0 + tid, row_lse[tid], row_delta[tid]);
  }
  float dq_acc[ELEMS];
#pragma unroll
  for (int m = 0; m < ELEMS; ++m) dq_acc[m] = 0.0f;
  __syncthreads();
  const AttnStats qst = attn_stats<B>(qp, qg);
  for (int j0 = 0; j0 < sh.s; j0 += B) {
    __syncthreads();  // the previous tile's readers are done
    attn_load_keys<T, D, B>(&Ks[0][0], D + 1, k, sh.k0, sh.k1, sh.k2, sh.s, b, g, j0);
    attn_load_keys<T, D, B>(&Vs[0][0], D + 1, v, sh.v0, sh.v1, sh.v2, sh.s, b, g, j0);
    if (tid < B) attn_key_slot(sl, sh, b, j0 + tid, kp[tid], kg[tid]);
    __syncthreads();
    if (attn_skipped(qst, attn_stats<B>(kp, kg))) continue;  // uniform over the block
#pragma unroll
    for (int n = 0; n < PAIRS; ++n) {
      const int p = tid + n * ATTN_THREADS, r = p / B, c = p % B;
      const float pr = attn_prob<D>(Qs[r], Ks[c], attn_sees(qp[r], qg[r], kp[c], kg[c]), row_lse[r], scale);
      Ps[r][c] = pr == 0.0f ? 0.0f : pr * (attn_dot<D>(dOs[r], Vs[c]) - row_delta[r]);
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < ELEMS; ++m) {
      const int e = tid + m * ATTN_THREADS, r = e / D, d = e % D;
      float a = 0.0f;
      for (int c = 0; c < B; ++c) a = fmaf(Ps[r][c], Ks[c][d], a);
      dq_acc[m] += a;
    }
  }
#pragma unroll
  for (int m = 0; m < ELEMS; ++m) {
    const int e = tid + m * ATTN_THREADS, r = e / D, d = e % D, f = f0 + r;
    if (f >= sh.folded()) continue;
    int h, i;
    attn_unfold(sh, g, f, h, i);
    dq[attn_row(sh, b, h, i) * D + d] = from_f32<T>(scale * dq_acc[m]);
  }
}

// Entry points: attn_{fwd,bwd_dkdv,bwd_dq}_d{64,128}_{f32,bf16} and
// attn_bwd_delta_{f32,bf16}. Shape arguments: heads, kv_heads, t, s, then
// the strides of q, k and v's first three dimensions (q0, q1, q2, k0, ...).
#define ATTN_SHAPE_PARAMS                                                                        \
  int heads, int kv_heads, int t, int s, int64_t q0, int64_t q1, int64_t q2, int64_t k0, int64_t k1, \
      int64_t k2, int64_t v0, int64_t v1, int64_t v2
#define ATTN_SHAPE AttnShape{heads, kv_heads, t, s, q0, q1, q2, k0, k1, k2, v0, v1, v2}
#define ATTN_SLOT_PARAMS const int64_t *qpos, const int64_t *kpos, const int64_t *qseg, const int64_t *kseg
#define ATTN_SLOTS AttnSlots{qpos, kpos, qseg, kseg}

#define ATTN_KERNELS_D(T, SUF, D)                                                                     \
  extern "C" __global__ void attn_fwd_d##D##_##SUF(const T *q, const T *k, const T *v, ATTN_SLOT_PARAMS, \
                                                   ATTN_SHAPE_PARAMS, float scale, T *out, float *lse) { \
    attn_fwd<T, D>(q, k, v, ATTN_SLOTS, ATTN_SHAPE, scale, out, lse);                                  \
  }                                                                                                    \
  extern "C" __global__ void attn_bwd_dkdv_d##D##_##SUF(                                               \
      const T *q, const T *k, const T *v, const T *dout, const float *lse, const float *delta,         \
      ATTN_SLOT_PARAMS, ATTN_SHAPE_PARAMS, float scale, T *dk, T *dv) {                                \
    attn_bwd_dkdv<T, D>(q, k, v, dout, lse, delta, ATTN_SLOTS, ATTN_SHAPE, scale, dk, dv);             \
  }                                                                                                    \
  extern "C" __global__ void attn_bwd_dq_d##D##_##SUF(                                                 \
      const T *q, const T *k, const T *v, const T *dout, const float *lse, const float *delta,         \
      ATTN_SLOT_PARAMS, ATTN_SHAPE_PARAMS, float scale, T *dq) {                                       \
    attn_bwd_dq<T, D>(q, k, v, dout, lse, delta, ATTN_SLOTS, ATTN_SHAPE, scale, dq);                   \
  }

#define ATTN_KERNELS(T, SUF)                                                                      \
  ATTN_KERNELS_D(T, SUF, 64)                                                                      \
  ATTN_KERNELS_D(T, SUF, 128)                                                                     \
  extern "C" __global__ void attn_bwd_delta_##SUF(const T *out, const T *dout, int n, int heads, int t, \
                                                  int D, float *delta) {                          \
    attn_bwd_delta<T>(out, dout, n, heads, t, D, delta);                                          \
  }

ATTN_KERNELS(float, f32)
ATTN_KERNELS(__nv_bfloat16, bf16)
