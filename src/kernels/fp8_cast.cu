// FP8 per-tensor casts, amax and quantize(+transpose); see fp8_cast_params.h. Both memory-bound:
// amax reads x once (16-byte loads, grid-stride, one atomicMax per block); the cast reads x once and
// writes the FP8 bytes row-major and/or transposed through a 64×64 shared-memory tile, so the
// backward's transposed operands cost no extra pass over the bf16 tensor.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/fp8_amax.cuh"
#include "kernels/fp8_cast_params.h"
#include "kernels/sm_count.h"
#include "kernels/fp8_delayed.cuh"
#include "kernels/fp8_history_params.h"
#include "kernels/fused_elementwise.cuh"

namespace lmscale::kernels {
namespace {

using namespace fused;

constexpr int kThreads = fp8_tile::kThreads;
constexpr int kVec = fp8_tile::kSeg;  // elements per thread access: 16 bytes of bf16, 8 bytes of FP8

// Eight consecutive elements of x as fp32 (one 16-byte load for bf16, two for fp32).
template <typename T>
__device__ __forceinline__ void load8(const T* p, float (&v)[kVec]) {
  if constexpr (sizeof(T) == 2) {
    load<8>(p, v);
  } else {
    float a[4], b[4];
    load<4>(p, a);
    load<4>(p + 4, b);
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = a[i], v[i + 4] = b[i];
  }
}

// ---------------------------------------------------------------------------------------------
// Kernels

template <typename T>
__global__ void __launch_bounds__(kThreads) fp8_amax_kernel(const T* x, int64_t vectors, uint32_t* amax_bits) {
  uint32_t m = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < vectors;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    float v[kVec];
    load8(x + i * kVec, v);
#pragma unroll
    for (int k = 0; k < kVec; ++k) m = max(m, abs_bits(v[k]));
  }
  block_amax_commit(m, amax_bits);
}

// Block (bx, by) owns rows [64·by, +64) and cols [64·bx, +64) of x (fp8_tile::tile_grid). Phase 1: each
// thread reads 8-element row segments, writes them row-major to `out` and keeps the bytes in the tile.
// Phase 2: the tile to out_t = xᵀ (fp8_tile::put_transposed).
template <typename T>
__global__ void __launch_bounds__(kThreads) fp8_cast_kernel(const Fp8CastParams p) {
  using namespace fp8_tile;
  __shared__ float scale;
  __shared__ __align__(16) Tile tile;
  if (threadIdx.x == 0) {
    scale = fp8_scale_from_amax(float_from_bits(*p.amax_bits), p.format);
    if (blockIdx.x == 0 && blockIdx.y == 0) *p.inv_scale = 1.f / scale;  // exact: s is a power of two
  }
  __syncthreads();
  const float s = scale;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTile, col0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const T* x = static_cast<const T*>(p.x);
  for (int i = threadIdx.x; i < kSegs; i += kThreads) {
    int r, c;
    segment(i, r, c);
    const int64_t gr = row0 + r, gc = col0 + c;
    if (gr >= p.rows || gc >= p.cols) continue;  // rows, cols are multiples of 16: segments are whole
    float v[kSeg];
    load8(x + gr * p.cols + gc, v);
    const uint2 packed = quantize8(v, s, p.format);
    if (p.out) *reinterpret_cast<uint2*>(static_cast<uint8_t*>(p.out) + gr * p.cols + gc) = packed;
    *reinterpret_cast<uint2*>(&tile[r][c]) = packed;
  }
  if (!p.out_t) return;
  __syncthreads();
  put_transposed(p.out_t, tile, p.rows, p.cols, row0, col0);
}

// The transpose of FP8 bytes, memory-bound at 1 B read + 1 B written per element. A 64×64 tile with
// 8-byte accesses (fp8_cast_kernel's shape) ran at 1.4 TB/s on an H100 (too few bytes in flight per
// thread), so: block (bx, by) owns a 128×128 tile; phase 1 reads 16-byte row segments (4 per thread) into
// shared memory, phase 2 writes 16 consecutive rows of one column as one 16-byte store of out (8 threads
// cover 128 contiguous bytes). Rows of the tile are 132 bytes apart, so the 8 row segments a warp reads
// down one column fall on 2 banks rather than 1.
constexpr int kTTile = 128, kTSeg = 16, kTPitch = kTTile + 4;

__global__ void __launch_bounds__(kThreads) fp8_transpose_kernel(const uint8_t* in, uint8_t* out, int64_t rows,
                                                                 int64_t cols, Fp8History* h, float* inv_out) {
  __shared__ __align__(16) uint8_t tile[kTTile * kTPitch];
  // A weight finished after its update (run_fp8_weight_finish): the decode factor it was written with,
  // then the roll for the next update. One thread; no other block reads the history.
  if (h && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    *inv_out = h->inv_scale;
    fp8_history_roll(*h);
  }
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTTile, col0 = static_cast<int64_t>(blockIdx.x) * kTTile;
  constexpr int kSegs = kTTile * (kTTile / kTSeg);  // 1024 per tile, 4 per thread
#pragma unroll
  for (int i = threadIdx.x; i < kSegs; i += kThreads) {
    const int r = i / (kTTile / kTSeg), c = (i % (kTTile / kTSeg)) * kTSeg;
    const int64_t gr = row0 + r, gc = col0 + c;
    if (gr >= rows || gc >= cols) continue;  // rows and cols multiples of 16: segments are whole
    const uint4 v = *reinterpret_cast<const uint4*>(in + gr * cols + gc);
    uint32_t* t = reinterpret_cast<uint32_t*>(tile + r * kTPitch + c);  // 4-byte aligned: pitch and c are
    t[0] = v.x, t[1] = v.y, t[2] = v.z, t[3] = v.w;
  }
  __syncthreads();
#pragma unroll
  for (int i = threadIdx.x; i < kSegs; i += kThreads) {
    const int c = i / (kTTile / kTSeg), r = (i % (kTTile / kTSeg)) * kTSeg;
    const int64_t gr = row0 + r, gc = col0 + c;
    if (gr >= rows || gc >= cols) continue;
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int k = 0; k < kTSeg; ++k) w[k / 4] |= uint32_t(tile[(r + k) * kTPitch + c]) << (8 * (k % 4));
    *reinterpret_cast<uint4*>(out + gc * rows + gr) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// ---------------------------------------------------------------------------------------------
// Launchers

void check(const Fp8CastParams& p, const char* what) {
  if (p.rows % 16 || p.cols % 16)
    throw std::runtime_error(std::string(what) + ": rows " + std::to_string(p.rows) + " and cols " +
                             std::to_string(p.cols) + " must be multiples of 16 (the FP8 GEMM's rule)");
  for (const void* ptr : {p.x, static_cast<const void*>(p.out), static_cast<const void*>(p.out_t)})
    if (reinterpret_cast<uintptr_t>(ptr) % 16)
      throw std::runtime_error(std::string(what) + ": pointers must be 16-byte aligned");
  if (!p.amax_bits) throw std::runtime_error(std::string(what) + ": amax_bits is null");
}

template <class F>
void with_input_type(FusedDtype d, F&& f) {
  if (d == FusedDtype::kBF16) f(__nv_bfloat16{});
  else f(float{});
}

}  // namespace

void run_fp8_amax(const Fp8CastParams& p, void* stream) {
  check(p, "run_fp8_amax");
  auto st = static_cast<cudaStream_t>(stream);
  // A memset node, not a fill kernel: one launch fewer per cast (240 casts a step at xl).
  LMSCALE_CUDA_CHECK(cudaMemsetAsync(p.amax_bits, 0, sizeof(uint32_t), st));
  if (p.rows == 0 || p.cols == 0) return;
  const int64_t vectors = p.rows * p.cols / kVec;
  const int sms = current_sm_count();
  // Enough blocks to fill every SM a few times over; more only adds atomics.
  const int64_t blocks = std::min<int64_t>((vectors + kThreads - 1) / kThreads, 4LL * sms);
  with_input_type(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    fp8_amax_kernel<T><<<blocks, kThreads, 0, st>>>(static_cast<const T*>(p.x), vectors, p.amax_bits);
  });
  LMSCALE_CUDA_CHECK_LAUNCH("fp8_amax_kernel");
}

void run_fp8_cast(const Fp8CastParams& p, void* stream) {
  check(p, "run_fp8_cast");
  if (!p.inv_scale) throw std::runtime_error("run_fp8_cast: inv_scale is null");
  if (p.rows == 0 || p.cols == 0) return;
  const dim3 grid = fp8_tile::tile_grid(p.rows, p.cols, "fp8_cast_kernel");
  with_input_type(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    fp8_cast_kernel<T><<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  });
  LMSCALE_CUDA_CHECK_LAUNCH("fp8_cast_kernel");
}

namespace {
void launch_transpose(const void* in, void* out, int64_t rows, int64_t cols, Fp8History* h, float* inv_out,
                      void* stream) {
  if (rows % 16 || cols % 16 || reinterpret_cast<uintptr_t>(in) % 16 || reinterpret_cast<uintptr_t>(out) % 16)
    throw std::runtime_error("run_fp8_transpose: rows " + std::to_string(rows) + " and cols " + std::to_string(cols) +
                             " must be multiples of 16 and the pointers 16-byte aligned");
  if (h && (rows == 0 || cols == 0)) throw std::runtime_error("run_fp8_weight_finish: an empty weight");
  if (rows == 0 || cols == 0) return;
  const int64_t row_tiles = (rows + kTTile - 1) / kTTile;
  check_grid_y(static_cast<int>(std::min<int64_t>(row_tiles, 1 << 30)), "fp8_transpose_kernel");
  const dim3 grid(static_cast<unsigned>((cols + kTTile - 1) / kTTile), static_cast<unsigned>(row_tiles));
  fp8_transpose_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint8_t*>(in), static_cast<uint8_t*>(out), rows, cols, h, inv_out);
  LMSCALE_CUDA_CHECK_LAUNCH("fp8_transpose_kernel");
}
}  // namespace

void run_fp8_transpose(const void* in, void* out, int64_t rows, int64_t cols, void* stream) {
  launch_transpose(in, out, rows, cols, nullptr, nullptr, stream);
}

void run_fp8_weight_finish(const void* fp8, void* fp8_t, int64_t rows, int64_t cols, Fp8History* history,
                           float* inv_scale, void* stream) {
  if (!history || !inv_scale) throw std::runtime_error("run_fp8_weight_finish: history and inv_scale are required");
  launch_transpose(fp8, fp8_t, rows, cols, history, inv_scale, stream);
}

}  // namespace lmscale::kernels
