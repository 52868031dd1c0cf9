// CPU emulation of the CUDA subset the kernels in kernels/cuda use, so their
// indexing and reductions can be checked on a machine without a GPU
// (scripts/cuda-kernels-emulated.sh). It stands in for <cuda_bf16.h>: blocks
// run one at a time, one std::thread per CUDA thread, __syncthreads is a
// barrier, shuffles go through an exchange buffer (block-wide, so every
// shuffle must be reached by all live threads, as in our kernels), and
// __shared__ is `static` (valid because blocks run sequentially).
#pragma once
#include <cstring>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>
#include <algorithm>
#include <memory>
struct dim3 { unsigned x = 1, y = 1, z = 1; };
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
inline std::unique_ptr<std::barrier<>> g_bar;
inline std::vector<float> g_xchg;
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
using std::min; using std::max;
inline void __syncthreads() { g_bar->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int off) {
  unsigned tid = threadIdx.x; g_xchg[tid] = v; g_bar->arrive_and_wait();
  float r = g_xchg[tid ^ off]; g_bar->arrive_and_wait(); return r;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
inline float atomicAdd(float *p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
struct __nv_bfloat16 { uint16_t bits; };
inline float __bfloat162float(__nv_bfloat16 b) { uint32_t u = (uint32_t)b.bits << 16; float f; memcpy(&f, &u, 4); return f; }
inline __nv_bfloat16 __float2bfloat16(float f) { uint32_t u; memcpy(&u, &f, 4); u += 0x7fff + ((u >> 16) & 1); return {(uint16_t)(u >> 16)}; }
template <class F> void launch(dim3 grid, dim3 block, F kernel) {
  gridDim = grid; blockDim = block; g_xchg.assign(block.x, 0.f);
  for (unsigned by = 0; by < grid.y; ++by) for (unsigned bx = 0; bx < grid.x; ++bx) {
    g_bar = std::make_unique<std::barrier<>>(block.x);
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < block.x; ++t) ts.emplace_back([=] { blockIdx = {bx, by, 1}; threadIdx = {t, 1, 1}; kernel(); g_bar->arrive_and_drop(); });
    for (auto &th : ts) th.join();
  }
}
