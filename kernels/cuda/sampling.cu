// Next-token sampling where the logits are (kernels/src/sampling): one block
// of SAMPLE_THREADS threads per row of [rows, V] logits (f32 or bf16), one
// uniform u in [0, 1) per row (f64), out [rows, 2] f32 rows [token, log-prob].
// The meaning is the CPU op's (kernels/src/sampling/mod.rs):
//   log-prob = x[token] / T - (m + log sum exp(x / T - m)), m = max x / T;
//   greedy: the first largest logit;
//   otherwise the kept set (all tokens, or the top_k largest with ties in
//   index order, then the smallest prefix of that order whose mass reaches
//   top_p of the top-k mass), and the token where u * kept mass falls,
//   walking the kept tokens in index order.
// No sort: a prefix of the (value desc, index asc) order is a "cut" (a key
// and an index: everything above the key, and the tokens at the key up to
// the index), found by bisection over the order-preserving u32 image of
// the logits (32 block reductions of a count or a mass), the ties at the
// key resolved in index order by a scan over per-thread contiguous chunks.
// Weights are expf in f32, sums in f64.
#include "common.cuh"

#define SAMPLE_THREADS 256
#define NO_INDEX 0x7fffffff

enum SampleMode { SAMPLE_GREEDY = 0, SAMPLE_SOFTMAX = 1, SAMPLE_TRUNCATED = 2 };

// a < b <=> key(a) < key(b) for non-NaN floats (-0 below +0, like total_cmp).
__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The first n tokens of the (key desc, index asc) order: keys above `key`,
// and at `key` the indices up to `index`. {0, NO_INDEX} admits every token.
struct Cut {
  uint32_t key;
  int index;
  __device__ __forceinline__ bool admits(uint32_t k, int i) const { return k > key || (k == key && i <= index); }
};

// Block-wide sum of v (every thread gets it). All threads must call it.
template <typename V> __device__ V block_total(V v) {
  __shared__ V buf[SAMPLE_THREADS];
  __syncthreads();
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = SAMPLE_THREADS / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  return buf[0];
}

// Block-wide max of v (every thread gets it). All threads must call it.
__device__ int block_max_int(int v) {
  __shared__ int buf[SAMPLE_THREADS];
  __syncthreads();
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = SAMPLE_THREADS / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) buf[threadIdx.x] = max(buf[threadIdx.x], buf[threadIdx.x + s]);
    __syncthreads();
  }
  return buf[0];
}

// Exclusive prefix of v over the threads in order, and the total.
__device__ double block_prefix(double v, double *total) {
  __shared__ double buf[SAMPLE_THREADS];
  __shared__ double sum;
  __syncthreads();
  buf[threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    double acc = 0.0;
    for (int i = 0; i < SAMPLE_THREADS; ++i) {
      const double x = buf[i];
      buf[i] = acc;
      acc += x;
    }
    sum = acc;
  }
  __syncthreads();
  *total = sum;
  return buf[threadIdx.x];
}

// The first largest logit and its index (every thread gets them).
template <typename T> __device__ void block_argmax(const T *x, int V, float *best, int *index) {
  __shared__ float vals[SAMPLE_THREADS];
  __shared__ int idxs[SAMPLE_THREADS];
  float b = -INFINITY;
  int bi = NO_INDEX;
  for (int i = threadIdx.x; i < V; i += SAMPLE_THREADS) {
    const float v = to_f32(x[i]);
    if (v > b) { b = v; bi = i; }
  }
  __syncthreads();
  vals[threadIdx.x] = b;
  idxs[threadIdx.x] = bi;
  __syncthreads();
  for (int s = SAMPLE_THREADS / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) {
      const float ov = vals[threadIdx.x + s];
      const int oi = idxs[threadIdx.x + s];
      if (ov > vals[threadIdx.x] || (ov == vals[threadIdx.x] && oi < idxs[threadIdx.x])) {
        vals[threadIdx.x] = ov;
        idxs[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  *best = vals[0];
  *index = idxs[0] == NO_INDEX ? 0 : idxs[0];
}

// One row's view: logits, 1 / temperature as a divisor, the scaled max, and
// this thread's contiguous chunk [lo, hi).
template <typename T> struct Row {
  const T *x;
  int V;
  float t, m;
  int lo, hi;
  __device__ __forceinline__ float logit(int i) const { return to_f32(x[i]); }
  __device__ __forceinline__ double weight(int i) const { return (double)expf(to_f32(x[i]) / t - m); }
  // measure of token i: its weight, or 1 when counting.
  __device__ __forceinline__ double measure(int i, bool by_mass) const { return by_mass ? weight(i) : 1.0; }
};

// Measure of the tokens `prior` admits whose key is >= tau (strided reads).
template <typename T> __device__ double measure_at_least(const Row<T> &r, Cut prior, bool by_mass, uint64_t tau) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < r.V; i += SAMPLE_THREADS) {
    const uint32_t k = order_key(r.logit(i));
    if ((uint64_t)k >= tau && prior.admits(k, i)) acc += r.measure(i, by_mass);
  }
  return block_total(acc);
}

// The shortest prefix of the (key desc, index asc) order of the tokens
// `prior` admits whose measure (count or mass) reaches `need` (> 0, at
// most the measure of all of them).
template <typename T> __device__ Cut find_cut(const Row<T> &r, Cut prior, bool by_mass, double need) {
  // The largest key tau with measure(key >= tau) >= need.
  uint64_t lo = 0, hi = 0xffffffffull;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo + 1) / 2;
    if (measure_at_least(r, prior, by_mass, mid) >= need) lo = mid; else hi = mid - 1;
  }
  const uint32_t key = (uint32_t)lo;
  const double above = lo == 0xffffffffull ? 0.0 : measure_at_least(r, prior, by_mass, lo + 1);
  // Ties at `key` in index order until the measure reaches `need`.
  double mine = 0.0;
  for (int i = r.lo; i < r.hi; ++i)
    if (order_key(r.logit(i)) == key && prior.admits(key, i)) mine += r.measure(i, by_mass);
  double ties;
  const double before = block_prefix(mine, &ties);
  const double rest = need - above;
  int found = -1, last = -1;
  for (int i = r.lo; i < r.hi; ++i)
    if (order_key(r.logit(i)) == key && prior.admits(key, i) && r.measure(i, by_mass) > 0.0) last = i;
  if (mine > 0.0 && before < rest && rest <= before + mine) {
    double acc = before;
    for (int i = r.lo; i < r.hi && found < 0; ++i) {
      if (order_key(r.logit(i)) != key || !prior.admits(key, i)) continue;
      acc += r.measure(i, by_mass);
      if (acc >= rest) found = i;
    }
    // The chunk's own sum rounded above its tokens': all its ties.
    if (found < 0) found = last;
  }
  found = block_max_int(found);
  // Rounding left every chunk short of `rest`: all the ties.
  if (found < 0) found = block_max_int(last);
  return Cut{key, found < 0 ? NO_INDEX : found};
}

// The token where `u` times the kept mass falls, kept tokens in index order
// (`top` and `p` admit them); its fallback is the last kept token of
// positive weight. Every thread gets it.
template <typename T> __device__ int block_walk(const Row<T> &r, Cut top, Cut p, double u) {
  double mine = 0.0;
  for (int i = r.lo; i < r.hi; ++i) {
    const uint32_t k = order_key(r.logit(i));
    if (top.admits(k, i) && p.admits(k, i)) mine += r.weight(i);
  }
  double total;
  const double before = block_prefix(mine, &total);
  const double target = u * total;
  int found = -1, last = -1;
  for (int i = r.lo; i < r.hi; ++i) {
    const uint32_t k = order_key(r.logit(i));
    if (top.admits(k, i) && p.admits(k, i) && r.weight(i) > 0.0) last = i;
  }
  if (mine > 0.0 && before <= target && target < before + mine) {
    double rest = target - before;
    for (int i = r.lo; i < r.hi && found < 0; ++i) {
      const uint32_t k = order_key(r.logit(i));
      if (!(top.admits(k, i) && p.admits(k, i))) continue;
      const double w = r.weight(i);
      if (rest < w) found = i; else rest -= w;
    }
    if (found < 0) found = last;
  }
  found = block_max_int(found);
  // u * total rounded past every chunk: the last kept token of positive weight.
  if (found < 0) found = block_max_int(last);
  return found;
}

template <typename T>
__device__ void sample_row(const T *logits, const double *uniforms, int V, int mode, float temperature, int top_k,
                           double top_p, float *out) {
  const int row = blockIdx.x;
  const T *x = logits + (int64_t)row * V;
  const float t = mode == SAMPLE_GREEDY ? 1.0f : temperature;
  float best;
  int argmax;
  block_argmax(x, V, &best, &argmax);
  const int chunk = (V + SAMPLE_THREADS - 1) / SAMPLE_THREADS;
  const int lo = min(V, (int)threadIdx.x * chunk), hi = min(V, lo + chunk);
  // Division by t > 0 is monotone: the scaled max is the max's quotient.
  const Row<T> r{x, V, t, best / t, lo, hi};
  double mine = 0.0;
  for (int i = lo; i < hi; ++i) mine += r.weight(i);
  const double total = block_total(mine);
  const Cut all{0u, NO_INDEX};
  int token = argmax;
  if (mode == SAMPLE_SOFTMAX) {
    token = block_walk(r, all, all, uniforms[row]);
  } else if (mode == SAMPLE_TRUNCATED) {
    const Cut top = (top_k > 0 && top_k < V) ? find_cut(r, all, false, (double)top_k) : all;
    Cut p = all;
    if (top_p < 1.0) {
      double kept = 0.0;
      for (int i = threadIdx.x; i < V; i += SAMPLE_THREADS)
        if (top.admits(order_key(r.logit(i)), i)) kept += r.weight(i);
      p = find_cut(r, top, true, top_p * block_total(kept));
    }
    token = block_walk(r, top, p, uniforms[row]);
  }
  if (token < 0) token = argmax;
  if (threadIdx.x == 0) {
    out[2 * row] = (float)token;
    out[2 * row + 1] = to_f32(x[token]) / t - (r.m + (float)log(total));
  }
}

#define SAMPLE_KERNELS(T, SUF)                                                                       \
  extern "C" __global__ void sample_##SUF(const T *logits, const double *uniforms, int V, int mode,  \
                                          float temperature, int top_k, double top_p, float *out) { \
    sample_row<T>(logits, uniforms, V, mode, temperature, top_k, top_p, out);                      \
  }

SAMPLE_KERNELS(float, f32)
SAMPLE_KERNELS(__nv_bfloat16, bf16)
