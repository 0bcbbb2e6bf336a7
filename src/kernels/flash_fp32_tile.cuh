// Shared-memory tile matmuls of the fp32 FlashAttention-2 kernels (flash_fp32_fwd.cu, _bwd.cu), and
// their host-side launch (the head-dim dispatch is head_dim_switch.h's, over flash_head_dims.h's list).
//
// Note [fp32 tile mapping]. A block of kThreads = 256 threads works on an "outer" tile of kOuter = 64
// rows (queries in the forward and dQ kernels, keys in the dK/dV kernel) against "inner" tiles of
// kInner = 32 rows. Thread t has ty = t / 16 (0..15) and tx = t % 16 (0..15); it owns the 4 outer rows
// ty*4 + r (r < 4) and, of a 32-wide score tile, the columns tx + 16c (c < 2), of a D-wide output the
// columns tx + 16c (c < D/16). So every score element and every output element has one owner, and
// the 16 owners of a row are 16 consecutive lanes of one warp (shuffles with xor < 16 reduce a row).
//
// Bank conflicts: score matmuls read A[row][k] (two distinct rows per warp, broadcast) and
// B[tx + 16c][k] (16 distinct rows): rows padded to an odd stride (D + 1) put those 16 in 16 banks.
// Output matmuls read A[row][j] (broadcast) and B[j][tx + 16c] (16 consecutive words).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_check.h"
#include "kernels/flash_params.h"
#include "kernels/flash_sequence.cuh"

namespace lmscale::kernels::flash_fp32 {

constexpr int kThreads = 256;
constexpr int kOuter = 64;  // rows per block
constexpr int kInner = 32;  // rows per inner tile
constexpr int kRowsPerThread = kOuter / 16;  // 4
constexpr int kScoreCols = kInner / 16;      // 2
constexpr int kScoreStride = kInner + 1;     // padded row of a score tile in shared memory

__host__ __device__ constexpr int padded(int d) { return d + 1; }

// Copies rows [row0, row0 + rows) of a (N, D) matrix with row stride `ld` (elements; D contiguous)
// into shared memory with row stride D + 1; rows at or past n are zero-filled.
template <int D>
__device__ __forceinline__ void load_rows(float* __restrict__ dst, const float* __restrict__ src, int64_t ld,
                                          int row0, int rows, int n) {
  for (int idx = threadIdx.x; idx < rows * D; idx += kThreads) {
    const int r = idx / D, c = idx % D;
    const int row = row0 + r;
    dst[r * padded(D) + c] = row < n ? src[static_cast<int64_t>(row) * ld + c] : 0.f;
  }
}

// acc[r][c] += sum_k A[ty*4 + r][k] * B[tx + 16c][k] for k < D: a 64 x 32 tile of A Bᵀ.
// A: 64 rows, B: 32 rows, both with row stride D + 1.
template <int D>
__device__ __forceinline__ void score_tile(float (&acc)[kRowsPerThread][kScoreCols], const float* __restrict__ A,
                                           const float* __restrict__ B) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll 4
  for (int k = 0; k < D; ++k) {
    float a[kRowsPerThread], b[kScoreCols];
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) a[r] = A[(ty * kRowsPerThread + r) * padded(D) + k];
#pragma unroll
    for (int c = 0; c < kScoreCols; ++c) b[c] = B[(tx + 16 * c) * padded(D) + k];
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r)
#pragma unroll
      for (int c = 0; c < kScoreCols; ++c) acc[r][c] = fmaf(a[r], b[c], acc[r][c]);
  }
}

// acc[r][c] += sum_j S[ty*4 + r][j] * B[j][tx + 16c] for j < 32: a 64 x D tile of S B.
// S: 64 x 32 with row stride kScoreStride; B: 32 rows with row stride D + 1.
template <int D>
__device__ __forceinline__ void output_tile(float (&acc)[kRowsPerThread][D / 16], const float* __restrict__ S,
                                            const float* __restrict__ B) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll 4
  for (int j = 0; j < kInner; ++j) {
    float s[kRowsPerThread], b[D / 16];
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) s[r] = S[(ty * kRowsPerThread + r) * kScoreStride + j];
#pragma unroll
    for (int c = 0; c < D / 16; ++c) b[c] = B[j * padded(D) + tx + 16 * c];
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r)
#pragma unroll
      for (int c = 0; c < D / 16; ++c) acc[r][c] = fmaf(s[r], b[c], acc[r][c]);
  }
}

// Writes the thread's score-tile elements v[r][c] to S[ty*4 + r][tx + 16c].
__device__ __forceinline__ void store_scores(float* __restrict__ S, const float (&v)[kRowsPerThread][kScoreCols]) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r)
#pragma unroll
    for (int c = 0; c < kScoreCols; ++c) S[(ty * kRowsPerThread + r) * kScoreStride + tx + 16 * c] = v[r][c];
}

// Writes acc[r][c] * scale to rows [row0 + ty*4 + r] (those below n) of a (N, D) matrix, row stride ld.
template <int D>
__device__ __forceinline__ void store_output(float* __restrict__ dst, int64_t ld, int row0, int n,
                                             const float (&acc)[kRowsPerThread][D / 16], float scale) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int row = row0 + ty * kRowsPerThread + r;
    if (row >= n) continue;
#pragma unroll
    for (int c = 0; c < D / 16; ++c) dst[static_cast<int64_t>(row) * ld + tx + 16 * c] = acc[r][c] * scale;
  }
}

// Reductions over the 16 lanes that own one row (Note [fp32 tile mapping]).
__device__ __forceinline__ float row_max(float x) {
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}
__device__ __forceinline__ float row_sum(float x) {
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// Row 0 of (batch b, head h) in a (B, H, N, D) or packed (total, H, D) tensor from its element strides.
template <typename P>
__device__ __forceinline__ P* head_ptr(P* base, int64_t batch_stride, int64_t head_stride, int64_t row_stride, int b,
                                       int h, int64_t row0) {
  return base + b * batch_stride + h * head_stride + row0 * row_stride;
}

// Query head h of sequence b: its sequence (lengths, mask), and the base pointers of its rows in every tensor the
// kernels touch (row r of q is q + r * p.q_row_stride, and so on; k, v, dk, dv those of its K/V head); null where
// the params have none.
struct Head {
  FlashSeq seq;
  const float *q, *k, *v, *dout;
  float *o, *dq, *dk, *dv, *lse, *dsum;  // lse, dsum: this head's (len_q) slice

  __device__ Head(const FlashParams& p, int b, int h) : seq(flash_seq(p, b)) {
    const int hk = h / flash_group(p);
    const int64_t qr = seq.q_row0, kr = seq.k_row0;
    q = head_ptr(static_cast<const float*>(p.q), p.q_batch_stride, p.q_head_stride, p.q_row_stride, b, h, qr);
    k = head_ptr(static_cast<const float*>(p.k), p.k_batch_stride, p.k_head_stride, p.k_row_stride, b, hk, kr);
    v = head_ptr(static_cast<const float*>(p.v), p.v_batch_stride, p.v_head_stride, p.v_row_stride, b, hk, kr);
    o = head_ptr(static_cast<float*>(p.o), p.o_batch_stride, p.o_head_stride, p.o_row_stride, b, h, qr);
    dout = p.dout ? head_ptr(static_cast<const float*>(p.dout), p.do_batch_stride, p.do_head_stride, p.do_row_stride,
                             b, h, qr)
                  : nullptr;
    dq = p.dq ? head_ptr(static_cast<float*>(p.dq), p.dq_batch_stride, p.dq_head_stride, p.dq_row_stride, b, h, qr)
              : nullptr;
    dk = p.dk ? head_ptr(static_cast<float*>(p.dk), p.dk_batch_stride, p.dk_head_stride, p.dk_row_stride, b, hk, kr)
              : nullptr;
    dv = p.dv ? head_ptr(static_cast<float*>(p.dv), p.dv_batch_stride, p.dv_head_stride, p.dv_row_stride, b, hk, kr)
              : nullptr;
    lse = p.lse + seq.stat_row0(h);
    dsum = p.dsum ? p.dsum + seq.stat_row0(h) : nullptr;
  }
};

// ----------------------------------------------------------------------------- host side

// Launches kernel on grid (heads, row_blocks) with kThreads threads and smem_bytes of dynamic shared memory
// (raising the 48 KB default when needed); heads: batch * query heads, or batch * K/V heads for the dK/dV kernel.
// Throws naming `name` on a launch error.
template <typename Kernel>
void launch(Kernel kernel, const FlashParams& p, int heads, int row_blocks, int smem_bytes, cudaStream_t stream,
            const char* name) {
  if (smem_bytes > 48 * 1024)
    LMSCALE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  check_grid_y(row_blocks, name);
  kernel<<<dim3(heads, row_blocks), kThreads, smem_bytes, stream>>>(p);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw_cuda_error(err, name, __FILE__, __LINE__);
}

}  // namespace lmscale::kernels::flash_fp32
