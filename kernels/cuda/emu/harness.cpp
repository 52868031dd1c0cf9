// Checks the CUDA kernels (kernels/cuda/*.cu) on the CPU through the
// emulation in cuda_bf16.h against double-precision references, with the
// launch logic of kernels/src/*/cuda.rs mirrored by hand (grid sizes, splits,
// backward chunks). Run by scripts/cuda-kernels-emulated.sh; not a CI test
// (it starts one OS thread per CUDA thread and takes minutes).
#include "cuda_bf16.h"
#include <cstdio>
#include <random>
#include <type_traits>
#include "logprobs.cu"
#include "norm.cu"
#include "rope.cu"

// k_<kernel><E>(args...): the f32 or bf16 instantiation of a kernel.
#define KERN(name)                                                                   \
  template <typename E, typename... A> void k_##name(A... a) {                       \
    if constexpr (std::is_same_v<E, float>) name##_f32(a...); else name##_bf16(a...); \
  }
KERN(tlp_fwd_partial) KERN(tlp_bwd_dz) KERN(tlp_bwd_grad_h)
KERN(tlp_bwd_grad_w) KERN(tlp_cast) KERN(rms_fwd) KERN(rms_bwd_dx) KERN(rms_rstd) KERN(rms_dw)
KERN(rms_cast) KERN(rope)

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

template <typename E> static void test_logprobs(int N, int D, int V, float T, size_t scratch_bytes) {
  const bool f32 = std::is_same_v<E, float>;
  auto he = to_t<E>(rnd((size_t)N * D, 1)), we = to_t<E>(rnd((size_t)V * D, 0.3f));
  auto h = to_f(he), w = to_f(we), g_lp = rnd(N, 1), g_lse = rnd(N, 0.5);
  std::vector<uint32_t> t(N);
  for (auto &x : t) x = rng() % V;
  const float inv_t = 1.0f / T;
  // Reference: logp, lse, entropy; gradients of sum(g_lp logp + g_lse lse).
  std::vector<double> lp_ref(N), lse_ref(N), ent_ref(N), gh_ref((size_t)N * D, 0), gw_ref((size_t)V * D, 0);
  for (int n = 0; n < N; ++n) {
    std::vector<double> z(V);
    double m = -1e300, s = 0, u = 0;
    for (int v = 0; v < V; ++v) {
      double a = 0;
      for (int k = 0; k < D; ++k) a += (double)h[(size_t)n * D + k] * w[(size_t)v * D + k];
      z[v] = a / T;
      m = std::max(m, z[v]);
    }
    for (int v = 0; v < V; ++v) { s += std::exp(z[v] - m); u += std::exp(z[v] - m) * z[v]; }
    const double lse = m + std::log(s);
    lp_ref[n] = z[t[n]] - lse;
    lse_ref[n] = lse;
    ent_ref[n] = lse - u / s;
    for (int v = 0; v < V; ++v) {
      const double p = std::exp(z[v] - lse);
      const double dz = (g_lp[n] * ((v == (int)t[n]) - p) + g_lse[n] * p) / T;
      for (int k = 0; k < D; ++k) {
        gh_ref[(size_t)n * D + k] += dz * w[(size_t)v * D + k];
        gw_ref[(size_t)v * D + k] += dz * h[(size_t)n * D + k];
      }
    }
  }
  // Launch logic of kernels/src/logprobs/cuda.rs.
  const size_t TILE = 64, TARGET_BLOCKS = 1056;
  const size_t row_blocks = (N + TILE - 1) / TILE, v_tiles = (V + TILE - 1) / TILE;
  const size_t want = std::clamp((TARGET_BLOCKS + row_blocks - 1) / row_blocks, (size_t)1, v_tiles);
  const size_t per_split = (v_tiles + want - 1) / want, splits = (v_tiles + per_split - 1) / per_split;
  std::vector<float> part(splits * N * 3, NAN), zt(N, 0), stats(3 * N, NAN);
  launch({(unsigned)row_blocks, (unsigned)splits}, {256}, [&] {
    k_tlp_fwd_partial<E>(he.data(), we.data(), t.data(), N, V, D, inv_t, (int)per_split, part.data(), zt.data());
  });
  launch({(unsigned)((N + 255) / 256)}, {256}, [&] {
    tlp_fwd_combine(part.data(), zt.data(), t.data(), N, V, (int)splits, stats.data());
  });
  std::vector<float> lp(N), lse(N), ent(N), aux(4 * N);
  for (int n = 0; n < N; ++n) {
    lp[n] = stats[3 * n]; lse[n] = stats[3 * n + 1]; ent[n] = stats[3 * n + 2];
    aux[4 * n] = (float)t[n]; aux[4 * n + 1] = lse[n]; aux[4 * n + 2] = g_lp[n]; aux[4 * n + 3] = g_lse[n];
  }
  const std::string name = std::string("logprobs ") + dn<E>() + " N=" + std::to_string(N) + " D=" + std::to_string(D) +
                           " V=" + std::to_string(V) + " splits=" + std::to_string(splits);
  report(name + " logp", maxdiff(lp, lp_ref), 1e-5);
  report("  lse", maxdiff(lse, lse_ref), 1e-5);
  report("  entropy", maxdiff(ent, ent_ref), 1e-5);
  const size_t chunk = std::min((size_t)V, std::max(TILE, (scratch_bytes / 4 / N) / TILE * TILE));
  std::vector<float> dz(N * chunk, NAN), gh((size_t)N * D, 0);
  std::vector<E> out((size_t)(N + V) * D, from_f32<E>(NAN));
  E *gw = out.data() + (size_t)N * D;
  for (size_t v0 = 0; v0 < (size_t)V; v0 += chunk) {
    const int cc = (int)std::min(chunk, V - v0);
    launch({(unsigned)row_blocks, (unsigned)((cc + 63) / 64)}, {256}, [&] {
      k_tlp_bwd_dz<E>(he.data(), we.data(), aux.data(), N, V, D, inv_t, (int)v0, cc, dz.data());
    });
    launch({(unsigned)row_blocks, (unsigned)((D + 63) / 64)}, {256}, [&] {
      k_tlp_bwd_grad_h<E>(dz.data(), we.data(), N, D, (int)v0, cc, gh.data());
    });
    launch({(unsigned)((cc + 63) / 64), (unsigned)((D + 63) / 64)}, {256}, [&] {
      k_tlp_bwd_grad_w<E>(dz.data(), he.data(), N, D, (int)v0, cc, gw);
    });
  }
  launch({(unsigned)((N * D + 255) / 256)}, {256}, [&] { k_tlp_cast<E>(gh.data(), (int64_t)N * D, out.data()); });
  auto outf = to_f(out);
  const std::vector<float> ghf(outf.begin(), outf.begin() + (size_t)N * D), gwf(outf.begin() + (size_t)N * D, outf.end());
  const double tol = f32 ? 1e-4 : 1e-2;
  report("  chunk=" + std::to_string(chunk) + " grad_hidden", maxdiff(ghf, gh_ref), tol);
  report("  chunk=" + std::to_string(chunk) + " grad_lm_head", maxdiff(gwf, gw_ref), tol);
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

template <typename E> static void all() {
  test_logprobs<E>(67, 80, 1037, 0.7f, 256u << 20);
  test_logprobs<E>(67, 80, 1037, 0.7f, 67 * 4 * 200);  // several backward chunks (192 rows)
  test_logprobs<E>(1, 33, 3001, 1.0f, 256u << 20);     // N = 1, many splits
  test_logprobs<E>(130, 17, 200, 1.3f, 130 * 4 * 64);  // chunks of one tile
  test_rms<E>(5, 200);
  test_rms<E>(3, 2560);
  test_rms<E>(300, 48);
  test_rope<E>(2, 3, 7, 64, false, true);
  test_rope<E>(1, 2, 5, 10, true, false);
}

int main() {
  all<float>();
  all<__nv_bfloat16>();
  printf("%d failures\n", fails);
  return fails != 0;
}
