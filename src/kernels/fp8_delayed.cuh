// Device helpers for the kernels that write FP8 operands through a 64×64 tile: fp8_cast.cu's cast,
// and the producers that write an operand in FP8 themselves under delayed scaling (kernels/
// fp8_history_params.h). The tile a block owns and its launch grid, eight values quantized to eight FP8 bytes,
// the tile's transposed write, and the block's amax committed to the history. One conversion for all
// of them, so a producer's bytes equal the cast's for the same scale. Header-only, no ATen.
#pragma once
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_check.h"
#include "kernels/fp8_amax.cuh"
#include "kernels/fp8_history_params.h"

namespace lmscale::kernels::fp8_tile {

constexpr int kThreads = 256;
constexpr int kTile = 64;  // a block's tile: kTile rows × kTile cols of the operand
constexpr int kSeg = 8;    // consecutive elements a thread handles at once (one 16-byte bf16 load)
constexpr int kSegs = kTile * (kTile / kSeg);  // segments per tile: 512, two per thread
// +8 bytes per row: phase 2's column reads then spread over more banks (as fp8_cast_kernel's tile).
using Tile = uint8_t[kTile][kTile + 8];

// Segment i of the block's tile: row r, first column c (r in [0, 64), c a multiple of 8).
__device__ __forceinline__ void segment(int i, int& r, int& c) {
  r = i / (kTile / kSeg);
  c = (i % (kTile / kSeg)) * kSeg;
}

// Two values (already scaled) to two FP8 bytes, a in the low byte: round to nearest even, saturating at
// ±max; NaN stays NaN.
__device__ __forceinline__ uint32_t fp8x2(float a, float b, Fp8Format f) {
  return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, f == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2);
}

// Eight values as stored (already rounded to the output dtype) times s, to FP8 bytes (value k in byte k).
__device__ __forceinline__ uint2 quantize8(const float (&v)[kSeg], float s, Fp8Format f) {
  uint32_t q[kSeg / 2];
#pragma unroll
  for (int k = 0; k < kSeg / 2; ++k) q[k] = fp8x2(v[2 * k] * s, v[2 * k + 1] * s, f);
  return make_uint2(q[0] | (q[1] << 16), q[2] | (q[3] << 16));
}

// N (1 or 4) values as stored times s, to N FP8 bytes at p (4-byte aligned for N = 4): quantize8's
// conversion, for kernels that walk rows in vectors of N rather than tiles (RMSNorm).
template <int N>
__device__ __forceinline__ void store_fp8(uint8_t* p, const float (&v)[N], float s, Fp8Format f) {
  if constexpr (N == 4) {
    *reinterpret_cast<uint32_t*>(p) = fp8x2(v[0] * s, v[1] * s, f) | (fp8x2(v[2] * s, v[3] * s, f) << 16);
  } else {
    static_assert(N == 1, "store_fp8 takes 1 or 4 values");
    *p = __nv_cvt_float_to_fp8(v[0] * s, __NV_SATFINITE, f == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2);
  }
}

// The grid of a tile kernel over a (rows, cols) operand: block (bx, by) owns rows [64·by, +64) and cols
// [64·bx, +64). Host side; throws when the row tiles exceed the grid's y limit.
inline dim3 tile_grid(int64_t rows, int64_t cols, const char* kernel) {
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  check_grid_y(static_cast<int>(row_tiles > (1 << 30) ? (1 << 30) : row_tiles), kernel);
  return dim3(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>(row_tiles));
}

// Stores one quantized segment at (gr, gc) of the row-major FP8 output and into the block's tile.
__device__ __forceinline__ void put(const Fp8DelayedOut& o, Tile& tile, int64_t cols, int r, int c, int64_t gr,
                                    int64_t gc, uint2 q) {
  *reinterpret_cast<uint2*>(static_cast<uint8_t*>(o.data) + gr * cols + gc) = q;
  *reinterpret_cast<uint2*>(&tile[r][c]) = q;
}

// The block's tile (rows [row0, +64), cols [col0, +64)) to the transposed output: each thread writes 8
// consecutive rows of one column, 8 consecutive bytes of out_t; 8 threads cover 64 contiguous bytes,
// so the stores coalesce. Call after a barrier that follows every put(). rows a multiple of 8.
__device__ __forceinline__ void put_transposed(void* out_t, const Tile& tile, int64_t rows, int64_t cols, int64_t row0,
                                               int64_t col0) {
  for (int i = threadIdx.x; i < kSegs; i += kThreads) {
    const int c = i / (kTile / kSeg), r = (i % (kTile / kSeg)) * kSeg;
    const int64_t gr = row0 + r, gc = col0 + c;
    if (gr >= rows || gc >= cols) continue;
    uint32_t lo = 0, hi = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) lo |= uint32_t(tile[r + k][c]) << (8 * k), hi |= uint32_t(tile[r + 4 + k][c]) << (8 * k);
    *reinterpret_cast<uint2*>(static_cast<uint8_t*>(out_t) + gc * rows + gr) = make_uint2(lo, hi);
  }
}

// The block's max of |stored values| (m: each thread's, as abs_bits) into the history's amax for the
// steps to come, and, when it is inf or NaN, NaN into inv_scale: the GEMM reading this operand then
// outputs NaN, as dynamic scaling's NaN scale makes it (fp8_scale.h). Every thread calls it (it
// synchronises the block); its barriers also order the tile's put()s before put_transposed().
__device__ __forceinline__ void commit_amax(uint32_t m, Fp8History* h) {
  if (m >= 0x7f800000u) h->inv_scale = __uint_as_float(0x7fc00000u);  // any thread: one value for all
  block_amax_commit(m, &h->amax);
}

}  // namespace lmscale::kernels::fp8_tile
