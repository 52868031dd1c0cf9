// Checks the CUDA kernels (kernels/cuda/*.cu) on the CPU through the
// emulation in cuda_bf16.h against double-precision references, with the
// launch logic of kernels/src/*/cuda.rs mirrored by hand (grid sizes, splits,
// backward chunks, attention tiles). Run by scripts/cuda-kernels-emulated.sh; not a CI test
// (it starts one OS thread per CUDA thread and takes minutes).
#include "cuda_bf16.h"
#include <cstdio>
#include <random>
#include <type_traits>
#include "logprobs.cu"
#include "norm.cu"
#include "rope.cu"
#include "attention.cu"
#include "sampling.cu"

// k_<kernel><E>(args...): the f32 or bf16 instantiation of a kernel.
#define KERN(name)                                                                   \
  template <typename E, typename... A> void k_##name(A... a) {                       \
    if constexpr (std::is_same_v<E, float>) name##_f32(a...); else name##_bf16(a...); \
  }
KERN(tlp_rows) KERN(tlp_cast) KERN(rms_fwd) KERN(rms_bwd_dx) KERN(rms_rstd) KERN(rms_dw)
KERN(rms_cast) KERN(rope) KERN(sample)

static std::mt19937 rng(1);
static int fails = 0;

static std::vector<float> rnd(size_t n, float s) {
  std::uniform_real_distribution<float> d(-s, s);
  std::vector<float> v(n);
  for (auto &x : v) x = d(rng);
  return v;
}
template <typename E> static std::vector<E> to_t(const std::vector<float> &v) {
  std::vector<E> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = from_f32<E>(v[i]);
  return o;
}
template <typename E> static std::vector<float> to_f(const std::vector<E> &v) {
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = to_f32(v[i]);
  return o;
}
// Max |a - b| relative to max |b|.
static double maxdiff(const std::vector<float> &a, const std::vector<double> &b) {
  double m = 0, sc = 1e-12;
  for (size_t i = 0; i < a.size(); ++i) { m = std::max(m, std::abs(a[i] - b[i])); sc = std::max(sc, std::abs(b[i])); }
  return m / sc;
}
static void report(const std::string &what, double rel, double tol) {
  printf("%-52s rel %.3e tol %.0e %s\n", what.c_str(), rel, tol, rel <= tol ? "PASS" : "FAIL");
  if (!(rel <= tol)) fails++;
}
template <typename E> static const char *dn() { return std::is_same_v<E, float> ? "f32" : "bf16"; }

// The row kernel of the log-prob head (tlp_rows_*) in its three modes on
// one chunk of f32 logits z (already divided by T, as the GEMM leaves them),
// against double-precision statistics and gradients: row 1's target is
// outside the vocabulary (NaN log-prob, no gradient), row 2 has weight 0 (a
// masked token: zero gradient). The gradient is read where the kernel
// writes it, as E over the row's own f32 logits (ld = V * 4 / sizeof(E)).
// Threads per block of the row kernel, as ROW_THREADS in logprobs/cuda.rs.
static const unsigned kRowThreads = 1024;
template <typename E> static void test_rows(int R, int V, float T) {
  const bool f32 = std::is_same_v<E, float>;
  const float inv_t = 1.0f / T;
  const std::vector<float> z0 = rnd((size_t)R * V, 6.0f), w = rnd(R, 1.0f), g_lp = rnd(R, 1.0f), g_lse = rnd(R, 0.5f);
  std::vector<uint32_t> t(R);
  for (auto &x : t) x = rng() % V;
  if (R > 1) t[1] = V + 3;
  std::vector<float> wt = w;
  if (R > 2) wt[2] = 0.0f;
  std::vector<double> lp_ref(R), lse_ref(R), ent_ref(R), dz_fold((size_t)R * V), dz_grad((size_t)R * V);
  for (int r = 0; r < R; ++r) {
    const float *z = z0.data() + (size_t)r * V;
    double m = -1e300, s = 0, u = 0;
    for (int v = 0; v < V; ++v) m = std::max(m, (double)z[v]);
    for (int v = 0; v < V; ++v) { s += std::exp(z[v] - m); u += std::exp(z[v] - m) * z[v]; }
    const double lse = m + std::log(s);
    const bool valid = t[r] < (uint32_t)V;
    lp_ref[r] = valid ? z[t[r]] - lse : NAN;
    lse_ref[r] = lse;
    ent_ref[r] = lse - u / s;
    for (int v = 0; v < V; ++v) {
      const double p = std::exp(z[v] - lse), hot = (uint32_t)v == t[r];
      dz_fold[(size_t)r * V + v] = valid ? wt[r] * (hot - p) / T : 0.0;
      dz_grad[(size_t)r * V + v] = valid ? (g_lp[r] * (hot - p) + g_lse[r] * p) / T : 0.0;
    }
  }
  auto valid_rows = [&](const std::vector<float> &got, const std::vector<double> &want, int cols, int col) {
    std::vector<float> a;
    std::vector<double> b;
    for (int r = 0; r < R; ++r)
      if (t[r] < (uint32_t)V) { a.push_back(got[(size_t)r * cols + col]); b.push_back(want[r]); }
    return maxdiff(a, b);
  };
  auto nan_where_invalid = [&](const std::vector<float> &got, int cols) {
    for (int r = 0; r < R; ++r)
      if (t[r] >= (uint32_t)V && !std::isnan(got[(size_t)r * cols])) return false;
    return true;
  };
  // The gradient as the next GEMM reads it.
  auto read_dz = [&](const std::vector<float> &buf) {
    const E *d = reinterpret_cast<const E *>(buf.data());
    const size_t ld = (size_t)V * sizeof(float) / sizeof(E);
    std::vector<float> out((size_t)R * V);
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) out[(size_t)r * V + v] = to_f32(d[r * ld + v]);
    return out;
  };
  const std::string name = std::string("rows ") + dn<E>() + " R=" + std::to_string(R) + " V=" + std::to_string(V);
  const double gtol = f32 ? 1e-5 : 8e-3;  // bf16 rounds each gradient (2^-9 relative)
  {  // TLP_STATS: statistics, the logits left as they were.
    std::vector<float> z = z0, stats(3 * R, -1.0f);
    launch({(unsigned)R}, {kRowThreads}, [&] { k_tlp_rows<E>(z.data(), V, inv_t, t.data(), (const float *)nullptr, TLP_STATS, stats.data()); });
    report(name + " stats logp", valid_rows(stats, lp_ref, 3, 0), 1e-5);
    report("  stats lse", valid_rows(stats, lse_ref, 3, 1), 1e-5);
    report("  stats entropy", valid_rows(stats, ent_ref, 3, 2), 1e-5);
    report("  stats: NaN log-prob for the invalid target, logits untouched", (nan_where_invalid(stats, 3) && z == z0) ? 0.0 : 1.0, 0.0);
  }
  {  // TLP_FOLDED: statistics with the weighted column and the folded gradient in place.
    std::vector<float> z = z0, stats(4 * R, -1.0f), tw(2 * R);
    for (int r = 0; r < R; ++r) { tw[2 * r] = (float)t[r]; tw[2 * r + 1] = wt[r]; }
    launch({(unsigned)R}, {kRowThreads}, [&] { k_tlp_rows<E>(z.data(), V, inv_t, (const uint32_t *)nullptr, tw.data(), TLP_FOLDED, stats.data()); });
    report("  folded logp", valid_rows(stats, lp_ref, 4, 0), 1e-5);
    report("  folded entropy", valid_rows(stats, ent_ref, 4, 2), 1e-5);
    std::vector<double> wlp(R);
    for (int r = 0; r < R; ++r) wlp[r] = wt[r] * lp_ref[r];
    report("  folded w logp", valid_rows(stats, wlp, 4, 3), 1e-5);
    report("  folded: NaN log-prob for the invalid target", nan_where_invalid(stats, 4) ? 0.0 : 1.0, 0.0);
    report("  folded gradient in place", maxdiff(read_dz(z), dz_fold), gtol);
  }
  {  // TLP_GRAD: the backward's gradient from (t, lse, g_logp, g_lse) rows.
    std::vector<float> z = z0, aux(4 * R);
    for (int r = 0; r < R; ++r) {
      aux[4 * r] = (float)t[r]; aux[4 * r + 1] = (float)lse_ref[r]; aux[4 * r + 2] = g_lp[r]; aux[4 * r + 3] = g_lse[r];
    }
    launch({(unsigned)R}, {kRowThreads}, [&] { k_tlp_rows<E>(z.data(), V, inv_t, (const uint32_t *)nullptr, aux.data(), TLP_GRAD, (float *)nullptr); });
    report("  backward gradient in place", maxdiff(read_dz(z), dz_grad), gtol);
  }
}

template <typename E> static void test_rms(int rows, int D) {
  const float eps = 1e-6f;
  const double tol = std::is_same_v<E, float> ? 1e-5 : 1e-2;
  auto xe = to_t<E>(rnd((size_t)rows * D, 2)), dye = to_t<E>(rnd((size_t)rows * D, 1));
  auto wf = rnd(D, 0.5);
  for (auto &v : wf) v += 1;
  auto we = to_t<E>(wf);
  auto x = to_f(xe), w = to_f(we), dy = to_f(dye);
  std::vector<double> y_ref((size_t)rows * D), dx_ref((size_t)rows * D), dw_ref(D, 0);
  for (int r = 0; r < rows; ++r) {
    double ss = 0, gx = 0;
    for (int k = 0; k < D; ++k) ss += (double)x[r * D + k] * x[r * D + k];
    const double rs = 1 / std::sqrt(ss / D + eps);
    for (int k = 0; k < D; ++k) {
      y_ref[r * D + k] = w[k] * x[r * D + k] * rs;
      gx += (double)dy[r * D + k] * w[k] * x[r * D + k];
      dw_ref[k] += dy[r * D + k] * x[r * D + k] * rs;
    }
    for (int k = 0; k < D; ++k) dx_ref[r * D + k] = rs * dy[r * D + k] * w[k] - rs * rs * rs * x[r * D + k] * gx / D;
  }
  // Launch logic of kernels/src/norm/cuda.rs.
  const unsigned th = std::clamp(std::bit_ceil((unsigned)D), 32u, 1024u);
  std::vector<E> y((size_t)rows * D), dx((size_t)rows * D), dw(D);
  std::vector<float> rstd(rows), acc(D, 0);
  launch({(unsigned)rows}, {th}, [&] { k_rms_fwd<E>(xe.data(), we.data(), D, eps, y.data()); });
  launch({(unsigned)rows}, {th}, [&] { k_rms_bwd_dx<E>(xe.data(), we.data(), dye.data(), D, eps, dx.data()); });
  launch({(unsigned)rows}, {th}, [&] { k_rms_rstd<E>(xe.data(), D, eps, rstd.data()); });
  launch({(unsigned)((D + 255) / 256), (unsigned)std::min(rows, 128)}, {256}, [&] {
    k_rms_dw<E>(xe.data(), dye.data(), rstd.data(), rows, D, acc.data());
  });
  launch({(unsigned)((D + 255) / 256)}, {256}, [&] { k_rms_cast<E>(acc.data(), (int64_t)D, dw.data()); });
  const std::string name = std::string("rms ") + dn<E>() + " rows=" + std::to_string(rows) + " D=" + std::to_string(D);
  report(name + " fwd", maxdiff(to_f(y), y_ref), tol);
  report("  grad_x", maxdiff(to_f(dx), dx_ref), tol);
  report("  grad_w", maxdiff(to_f(dw), dw_ref), tol);
}

template <typename E> static void test_rope(int B, int H, int Tn, int D, bool half_table, bool batched) {
  const int hf = D / 2, row = half_table ? hf : D, crow = batched ? B * Tn : Tn;
  const double tol = std::is_same_v<E, float> ? 1e-6 : 1e-2;
  auto xe = to_t<E>(rnd((size_t)B * H * Tn * D, 1)), ce = to_t<E>(rnd((size_t)crow * row, 1)), se = to_t<E>(rnd((size_t)crow * row, 1));
  auto x = to_f(xe), c = to_f(ce), s = to_f(se);
  std::vector<double> y_ref(x.size()), dx_ref(x.size());
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < Tn; ++t)
        for (int i = 0; i < hf; ++i) {
          const size_t base = (((size_t)b * H + h) * Tn + t) * D, cs = (size_t)((batched ? b * Tn : 0) + t) * row + i;
          const double x1 = x[base + i], x2 = x[base + i + hf];
          y_ref[base + i] = x1 * c[cs] - x2 * s[cs];
          y_ref[base + i + hf] = x2 * c[cs] + x1 * s[cs];
          dx_ref[base + i] = x1 * c[cs] + x2 * s[cs];
          dx_ref[base + i + hf] = x2 * c[cs] - x1 * s[cs];
        }
  std::vector<E> y(x.size()), dx(x.size());
  const unsigned blocks = std::min<size_t>((x.size() / 2 + 255) / 256, 3);  // few blocks: the grid-stride loop
  launch({blocks}, {256}, [&] { k_rope<E>(xe.data(), ce.data(), se.data(), B, H, Tn, D, row, (int)batched, 1.0f, y.data()); });
  launch({blocks}, {256}, [&] { k_rope<E>(xe.data(), ce.data(), se.data(), B, H, Tn, D, row, (int)batched, -1.0f, dx.data()); });
  report(std::string("rope ") + dn<E>() + " [" + std::to_string(B) + "," + std::to_string(H) + "," + std::to_string(Tn) + "," +
             std::to_string(D) + "] row=" + std::to_string(row) + " batched=" + std::to_string(batched) + " fwd",
         maxdiff(to_f(y), y_ref), tol);
  report("  bwd", maxdiff(to_f(dx), dx_ref), tol);
}

// One attention call: shapes, per-slot positions (-1 padding) and segments
// ([b, t] and [b, s]), and the layouts: q as [b, heads, t, D] or a
// transposed [b, t, heads, D] buffer; k, v as [b, kv, s, D] or a view of a
// [b, cap, kv, D] cache starting at slot 3 (cap = s + 5).
struct AttnCase {
  std::string name;
  int b, heads, kv, t, s;
  std::vector<int64_t> qpos, kpos, qseg, kseg;
  bool q_strided, kv_cache;
};

// Strides (first three dims) and start offset of a layout, and its buffer size.
struct Lay { int64_t s0, s1, s2, off, size; };
static Lay q_layout(const AttnCase &c, int D) {
  if (c.q_strided) return {(int64_t)c.t * c.heads * D, D, (int64_t)c.heads * D, 0, (int64_t)c.b * c.t * c.heads * D};
  return {(int64_t)c.heads * c.t * D, (int64_t)c.t * D, D, 0, (int64_t)c.b * c.heads * c.t * D};
}
static Lay kv_layout(const AttnCase &c, int D) {
  if (!c.kv_cache) return {(int64_t)c.kv * c.s * D, (int64_t)c.s * D, D, 0, (int64_t)c.b * c.kv * c.s * D};
  const int64_t cap = c.s + 5;
  return {cap * c.kv * D, D, (int64_t)c.kv * D, 3 * (int64_t)c.kv * D, (int64_t)c.b * cap * c.kv * D};
}

static bool attn_sees_ref(const AttnCase &c, int b, int i, int j) {
  const int64_t qp = c.qpos[b * c.t + i], kp = c.kpos[b * c.s + j];
  if (qp < 0) return true;
  return kp >= 0 && kp <= qp && c.qseg[b * c.t + i] == c.kseg[b * c.s + j];
}

#define ATTN_CALL(kern, E, D, ...)                                                          \
  do {                                                                                      \
    if constexpr (std::is_same_v<E, float> && D == 64) kern##_d64_f32(__VA_ARGS__);         \
    else if constexpr (std::is_same_v<E, float>) kern##_d128_f32(__VA_ARGS__);             \
    else if constexpr (D == 64) kern##_d64_bf16(__VA_ARGS__);                               \
    else kern##_d128_bf16(__VA_ARGS__);                                                     \
  } while (0)

template <typename E, int D> static void test_attention(const AttnCase &c) {
  const bool f32 = std::is_same_v<E, float>;
  const int groups = c.heads / c.kv, B = 2048 / D;
  const float scale = 1.0f / std::sqrt((float)D);
  const Lay ql = q_layout(c, D), kl = kv_layout(c, D);
  auto qe = to_t<E>(rnd(ql.size, 1)), ke = to_t<E>(rnd(kl.size, 1)), ve = to_t<E>(rnd(kl.size, 1));
  auto doe = to_t<E>(rnd((size_t)c.b * c.t * c.heads * D, 1));
  auto qf = to_f(qe), kf = to_f(ke), vf = to_f(ve), dof = to_f(doe);
  auto Q = [&](int b, int h, int i, int d) { return (double)qf[ql.off + b * ql.s0 + h * ql.s1 + i * ql.s2 + d]; };
  auto K = [&](int b, int g, int j, int d) { return (double)kf[kl.off + b * kl.s0 + g * kl.s1 + j * kl.s2 + d]; };
  auto V = [&](int b, int g, int j, int d) { return (double)vf[kl.off + b * kl.s0 + g * kl.s1 + j * kl.s2 + d]; };
  auto merged = [&](int b, int i, int h) { return (((size_t)b * c.t + i) * c.heads + h) * D; };
  // Reference (double): out, lse, and the gradients for the upstream dO.
  const size_t nq = (size_t)c.b * c.heads * c.t * D, nk = (size_t)c.b * c.kv * c.s * D;
  std::vector<double> o_ref(nq, 0), lse_ref((size_t)c.b * c.heads * c.t), dq_ref(nq, 0), dk_ref(nk, 0), dv_ref(nk, 0);
  for (int b = 0; b < c.b; ++b)
    for (int h = 0; h < c.heads; ++h)
      for (int i = 0; i < c.t; ++i) {
        const int g = h / groups;
        std::vector<double> sc(c.s, -INFINITY), p(c.s, 0), dp(c.s, 0);
        double m = -INFINITY, sum = 0, dl = 0;
        for (int j = 0; j < c.s; ++j) {
          if (!attn_sees_ref(c, b, i, j)) continue;
          double a = 0;
          for (int d = 0; d < D; ++d) a += Q(b, h, i, d) * K(b, g, j, d);
          sc[j] = a * scale;
          m = std::max(m, sc[j]);
        }
        for (int j = 0; j < c.s; ++j) sum += sc[j] == -INFINITY ? 0 : std::exp(sc[j] - m);
        lse_ref[((size_t)b * c.heads + h) * c.t + i] = m + std::log(sum);
        const size_t at = merged(b, i, h);
        for (int j = 0; j < c.s; ++j) {
          if (sc[j] == -INFINITY) continue;
          p[j] = std::exp(sc[j] - m) / sum;
          for (int d = 0; d < D; ++d) {
            o_ref[at + d] += p[j] * V(b, g, j, d);
            dp[j] += dof[at + d] * V(b, g, j, d);
          }
          dl += p[j] * dp[j];
        }
        for (int j = 0; j < c.s; ++j) {
          if (p[j] == 0) continue;
          const double ds = p[j] * (dp[j] - dl);
          const size_t kat = (((size_t)b * c.kv + g) * c.s + j) * D, qat = (((size_t)b * c.heads + h) * c.t + i) * D;
          for (int d = 0; d < D; ++d) {
            dq_ref[qat + d] += scale * ds * K(b, g, j, d);
            dk_ref[kat + d] += scale * ds * Q(b, h, i, d);
            dv_ref[kat + d] += p[j] * dof[at + d];
          }
        }
      }
  // Launch logic of kernels/src/attention/cuda.rs.
  const E *qp = qe.data() + ql.off, *kp = ke.data() + kl.off, *vp = ve.data() + kl.off;
  const int64_t *qpos = c.qpos.data(), *kpos = c.kpos.data(), *qseg = c.qseg.data(), *kseg = c.kseg.data();
  const unsigned q_tiles = (groups * c.t + B - 1) / B, k_tiles = (c.s + B - 1) / B, rows = c.b * c.kv;
  std::vector<E> out(nq, from_f32<E>(NAN)), dq(nq, from_f32<E>(NAN)), dk(nk, from_f32<E>(NAN)), dv(nk, from_f32<E>(NAN));
  std::vector<float> lse((size_t)c.b * c.heads * c.t, NAN), delta(lse.size(), NAN);
#define ATTN_ARGS qpos, kpos, qseg, kseg, c.heads, c.kv, c.t, c.s, ql.s0, ql.s1, ql.s2, kl.s0, kl.s1, kl.s2, kl.s0, kl.s1, kl.s2, scale
  launch({q_tiles, rows}, {128}, [&] { ATTN_CALL(attn_fwd, E, D, qp, kp, vp, ATTN_ARGS, out.data(), lse.data()); });
  const int n = (int)lse.size();
  launch({(unsigned)((n + 255) / 256)}, {256}, [&] {
    if constexpr (f32) attn_bwd_delta_f32(out.data(), doe.data(), n, c.heads, c.t, D, delta.data());
    else attn_bwd_delta_bf16(out.data(), doe.data(), n, c.heads, c.t, D, delta.data());
  });
  launch({k_tiles, rows}, {128}, [&] {
    ATTN_CALL(attn_bwd_dkdv, E, D, qp, kp, vp, doe.data(), lse.data(), delta.data(), ATTN_ARGS, dk.data(), dv.data());
  });
  launch({q_tiles, rows}, {128}, [&] {
    ATTN_CALL(attn_bwd_dq, E, D, qp, kp, vp, doe.data(), lse.data(), delta.data(), ATTN_ARGS, dq.data());
  });
#undef ATTN_ARGS
  const double tol = f32 ? 1e-5 : 2e-2;
  report(std::string("attention ") + dn<E>() + " D=" + std::to_string(D) + " " + c.name + " out", maxdiff(to_f(out), o_ref), tol);
  report("  lse", maxdiff(lse, lse_ref), 1e-5);
  report("  grad_q", maxdiff(to_f(dq), dq_ref), tol);
  report("  grad_k", maxdiff(to_f(dk), dk_ref), tol);
  report("  grad_v", maxdiff(to_f(dv), dv_ref), tol);
}

// Positions 0.. for `n` slots after `pad_front` padding ones, then `pad_back` more.
static void push_row(std::vector<int64_t> &pos, int pad_front, int n, int pad_back, int64_t first = 0) {
  for (int i = 0; i < pad_front; ++i) pos.push_back(-1);
  for (int i = 0; i < n; ++i) pos.push_back(first + i);
  for (int i = 0; i < pad_back; ++i) pos.push_back(-1);
}

template <typename E> static void attention_cases() {
  {  // groups 1, t = s = 45 (no multiple of the 32-row tile), a padded row
    AttnCase c{"b=2 h=2/2 t=s=45 padded", 2, 2, 2, 45, 45, {}, {}, {}, {}, false, false};
    push_row(c.qpos, 0, 45, 0);
    push_row(c.qpos, 4, 39, 2);
    c.kpos = c.qpos;
    c.qseg.assign(c.qpos.size(), 0);
    c.kseg = c.qseg;
    test_attention<E, 64>(c);
  }
  {  // decode: t = 1 against 40 keys of a cache view, groups 4, row 1 left-padded
    AttnCase c{"b=2 h=4/1 t=1 s=40 cache view", 2, 4, 1, 1, 40, {39, 36}, {}, {}, {}, false, true};
    push_row(c.kpos, 0, 40, 0);
    push_row(c.kpos, 3, 37, 0);
    c.qseg.assign(2, 0);
    c.kseg.assign(80, 0);
    test_attention<E, 128>(c);
  }
  {  // packed row: segments of 15, 17 and 6 slots, 2 padding, groups 4
    AttnCase c{"b=1 h=4/1 t=s=40 packed", 1, 4, 1, 40, 40, {}, {}, {}, {}, false, false};
    const int lens[3] = {15, 17, 6};
    for (int sg = 0; sg < 3; ++sg) {
      push_row(c.qpos, 0, lens[sg], 0);
      c.qseg.insert(c.qseg.end(), lens[sg], sg);
    }
    push_row(c.qpos, 0, 0, 2);
    c.qseg.insert(c.qseg.end(), 2, 3);
    c.kpos = c.qpos;
    c.kseg = c.qseg;
    test_attention<E, 64>(c);
  }
  {  // 20 queries after 13 cached keys, groups 2, strided q and a cache view;
     // row 1 packs two segments (10 keys, then 23 holding the queries)
    AttnCase c{"b=2 h=2/1 t=20 s=33 strided q+kv, segments", 2, 2, 1, 20, 33, {}, {}, {}, {}, true, true};
    push_row(c.kpos, 0, 33, 0);
    push_row(c.kpos, 0, 10, 0);
    push_row(c.kpos, 0, 23, 0);
    c.kseg.assign(33, 0);
    c.kseg.insert(c.kseg.end(), 10, 0);
    c.kseg.insert(c.kseg.end(), 23, 1);
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < 20; ++i) {
        c.qpos.push_back(c.kpos[b * 33 + 13 + i]);
        c.qseg.push_back(c.kseg[b * 33 + 13 + i]);
      }
    test_attention<E, 128>(c);
  }
}

// The sampling op's meaning in double (kernels/src/sampling/mod.rs,
// sample_reference): token, log-prob, and how far u lies from a boundary of
// the kept tokens' cumulative masses (a fraction of the kept mass).
struct SamplePick { int token; double logprob, margin; };
static SamplePick sample_ref(const float *x, int V, double u, int mode, double T, int top_k, double top_p) {
  const double t = mode == SAMPLE_GREEDY ? 1.0 : T;
  std::vector<double> s(V), w(V);
  double m = -1e300;
  for (int i = 0; i < V; ++i) { s[i] = x[i] / t; m = std::max(m, s[i]); }
  double z = 0;
  for (int i = 0; i < V; ++i) { w[i] = std::exp(s[i] - m); z += w[i]; }
  const double lse = m + std::log(z);
  if (mode == SAMPLE_GREEDY) {
    int tok = 0;
    for (int i = 0; i < V; ++i) if (s[i] == m) { tok = i; break; }
    return {tok, s[tok] - lse, 1e300};
  }
  std::vector<int> kept(V);
  for (int i = 0; i < V; ++i) kept[i] = i;
  if (mode == SAMPLE_TRUNCATED) {
    std::stable_sort(kept.begin(), kept.end(), [&](int a, int b) { return x[a] > x[b]; });
    if (top_k > 0 && top_k < V) kept.resize(top_k);
    double mass = 0;
    for (int i : kept) mass += w[i];
    if (top_p < 1.0) {
      double acc = 0;
      size_t n = kept.size();
      for (size_t j = 0; j < kept.size(); ++j) { acc += w[kept[j]] / mass; if (acc >= top_p) { n = j + 1; break; } }
      kept.resize(n);
    }
    std::sort(kept.begin(), kept.end());
  }
  double mass = 0;
  for (int i : kept) mass += w[i];
  const double target = u * mass;
  double below = 0;
  for (int i : kept) {
    if (target < below + w[i]) return {i, s[i] - lse, std::min(target - below, below + w[i] - target) / mass};
    below += w[i];
  }
  return {kept.back(), s[kept.back()] - lse, 0};
}

// Rows of logits in [-4, 4) with peaks, or (`levels`) only 9 distinct values
// (ties at every cut); uniforms in [0, 1); the kernel's picks against the
// reference away from boundaries, log-probs within 3e-5.
template <typename E> static void test_sample(int rows, int V, int mode, float T, int top_k, double top_p, bool levels) {
  std::vector<float> raw = rnd((size_t)rows * V, 4);
  for (int r = 0; r < rows; ++r)
    for (int p = 0; p < 8; ++p) raw[(size_t)r * V + rng() % V] += 6.0f + p;
  if (levels) for (auto &v : raw) v = std::round(v) * 0.5f;
  auto xe = to_t<E>(raw);
  auto x = to_f(xe);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  std::vector<double> us(rows);
  for (auto &u : us) u = ud(rng);
  std::vector<float> out((size_t)rows * 2);
  // Launch logic of kernels/src/sampling/cuda.rs: one block of SAMPLE_THREADS per row.
  launch({(unsigned)rows}, {SAMPLE_THREADS}, [&] { k_sample<E>(xe.data(), us.data(), V, mode, T, top_k, top_p, out.data()); });
  int wrong = 0, skipped = 0;
  double worst = 0;
  for (int r = 0; r < rows; ++r) {
    const SamplePick want = sample_ref(x.data() + (size_t)r * V, V, us[r], mode, T, top_k, top_p);
    if (want.margin < 5e-7) { skipped++; continue; }
    if ((int)out[2 * r] != want.token) wrong++;
    worst = std::max(worst, std::abs(out[2 * r + 1] - want.logprob));
  }
  char name[160];
  snprintf(name, sizeof name, "sample %s V=%d mode=%d T=%.1f k=%d p=%.2f%s: %d wrong, %d skipped; logprob", dn<E>(), V, mode, T,
           top_k, top_p, levels ? " ties" : "", wrong, skipped);
  report(name, wrong == 0 && skipped * 3 <= rows ? worst : 1e9, 3e-5);
}

template <typename E> static void sampling_cases() {
  for (int V : {1, 7, 1000, 8193}) {
    test_sample<E>(3, V, SAMPLE_GREEDY, 1.0f, 0, 1.0, false);
    test_sample<E>(3, V, SAMPLE_SOFTMAX, 0.7f, 0, 1.0, false);
    test_sample<E>(3, V, SAMPLE_TRUNCATED, 1.0f, 40, 1.0, false);
    test_sample<E>(3, V, SAMPLE_TRUNCATED, 0.8f, 0, 0.9, false);
    test_sample<E>(3, V, SAMPLE_TRUNCATED, 1.0f, 100, 0.95, true);
  }
  test_sample<E>(4, 151936, SAMPLE_GREEDY, 1.0f, 0, 1.0, false);
  test_sample<E>(4, 151936, SAMPLE_SOFTMAX, 1.0f, 0, 1.0, false);
  test_sample<E>(4, 151936, SAMPLE_TRUNCATED, 1.0f, 1000, 0.95, false);
  test_sample<E>(4, 151936, SAMPLE_TRUNCATED, 0.7f, 0, 0.9, true);
  test_sample<E>(4, 151936, SAMPLE_TRUNCATED, 1.2f, 1, 1.0, true);
}

// Every check, or only those of the kernel family `only` (logprobs, rms, rope, attention, sampling).
template <typename E> static void all(const std::string &only) {
  auto want = [&](const char *family) { return only.empty() || only == family; };
  if (want("logprobs")) {
    test_rows<E>(5, 1037, 0.7f);  // V not a multiple of the block (1024)
    test_rows<E>(3, 200, 1.3f);   // V smaller than the block
    test_rows<E>(4, 769, 1.0f);   // one partial tile
    test_rows<E>(3, 3001, 0.9f);  // three tiles, the last partial
  }
  if (want("rms")) {
    test_rms<E>(5, 200);
    test_rms<E>(3, 2560);
    test_rms<E>(300, 48);
  }
  if (want("rope")) {
    test_rope<E>(2, 3, 7, 64, false, true);
    test_rope<E>(1, 2, 5, 10, true, false);
  }
  if (want("attention")) attention_cases<E>();
  if (want("sampling")) sampling_cases<E>();
}

int main(int argc, char **argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  all<float>(only);
  all<__nv_bfloat16>(only);
  printf("%d failures\n", fails);
  return fails != 0;
}
