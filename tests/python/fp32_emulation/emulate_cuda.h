// Host emulation of the few CUDA features the fp32 flash kernels (src/kernels/flash_fp32_*.cu) use, so
// their logic runs on a CPU (test_flash_fp32_emulated.py): every block runs as blockDim std::threads
// with real barriers for __syncthreads and per-warp barriers around __shfl_xor_sync, and dynamic
// shared memory is a fresh NaN-filled buffer per block (a read before a write poisons the output).
// Blocks run one after another. Built with -fsanitize=thread, a missing barrier shows as a data race.
// Force-included ahead of the kernel sources, whose CUDA-only lines the test rewrites.
#pragma once
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>
#include <limits>
#include <string>
#include <stdexcept>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __restrict__
using std::min;
using std::max;
struct dim3 { unsigned x = 1, y = 1, z = 1; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
struct int2 { int x, y; };
inline int2 make_int2(int x, int y) { return {x, y}; }
typedef void* cudaStream_t;
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
inline cudaError_t cudaGetLastError() { return 0; }
template <typename K> cudaError_t cudaFuncSetAttribute(K, int, int) { return 0; }
inline const char* cudaGetErrorName(cudaError_t) { return "x"; }
inline const char* cudaGetErrorString(cudaError_t) { return "x"; }
inline thread_local dim3 threadIdx, blockIdx;
namespace emu {
struct Barrier {
  int n, count = 0, gen = 0; std::mutex m; std::condition_variable cv;
  explicit Barrier(int n_) : n(n_) {}
  void wait() { std::unique_lock<std::mutex> l(m); int g = gen; if (++count == n) { count = 0; ++gen; cv.notify_all(); } else cv.wait(l, [&] { return g != gen; }); }
};
inline thread_local Barrier* block_barrier;
inline thread_local Barrier* warp_barrier;
inline thread_local float* warp_vals;
inline thread_local float* smem_ptr;
inline float* smem() { return smem_ptr; }
inline long smem_floats_used = 0;
template <typename K, typename P>
void launch(K kernel, dim3 grid, int threads, int smem_bytes, const P& p) {
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      std::vector<float> shared(smem_bytes / 4 + 1, std::numeric_limits<float>::quiet_NaN());
      Barrier block(threads);
      std::vector<Barrier*> warps; std::vector<std::vector<float>> vals;
      for (int w = 0; w < threads / 32; ++w) { warps.push_back(new Barrier(32)); vals.emplace_back(32); }
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
          threadIdx = dim3(t); blockIdx = dim3(bx, by);
          block_barrier = &block; warp_barrier = warps[t / 32]; warp_vals = vals[t / 32].data();
          smem_ptr = shared.data();
          kernel(p);
        });
      for (auto& th : ts) th.join();
      for (auto* w : warps) delete w;
      // One float past the declared size: a kernel writing there overran its shared memory.
      if (!std::isnan(shared[smem_bytes / 4])) throw std::runtime_error("shared memory overrun");
    }
}
}  // namespace emu
inline void __syncthreads() { emu::block_barrier->wait(); }
inline float __shfl_xor_sync(unsigned, float v, int off) {
  int lane = threadIdx.x % 32;
  emu::warp_vals[lane] = v; emu::warp_barrier->wait();
  float r = emu::warp_vals[lane ^ off]; emu::warp_barrier->wait();
  return r;
}

