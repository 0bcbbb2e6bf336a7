// Device helpers shared by the FlashAttention-2 forward and backward kernels: tensor-core MMA
// (mma.sync m16n8k16, fp32 accumulate), ldmatrix fragment loads, cp.async tile copies with zero-fill
// for sequence tails, and quad reductions. The kernels themselves live in flash_{fwd,bwd}_kernel.cuh.
//
// Note [mma fragments]. For mma.sync.m16n8k16 with g = lane/4, t = lane%4:
//   A (16x16, row-major):  a0 = (g, 2t..2t+1)  a1 = (g+8, 2t..)  a2 = (g, 2t+8..)  a3 = (g+8, 2t+8..)
//   B (16x8, k x n):       b0 = (k 2t..2t+1, n g)  b1 = (k 2t+8.., n g)
//   C (16x8, fp32):        c0,c1 = (g, 2t..2t+1)   c2,c3 = (g+8, 2t..2t+1)
// A C fragment of two adjacent n8 tiles is therefore exactly an A fragment of one k16 chunk, which is
// how P (or dS) goes from the first matmul's accumulators into the second matmul without shared memory.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace lmscale::kernels::flash {

// ----------------------------------------------------------------------------- element types

template <typename T>
struct Elem;

template <>
struct Elem<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t x) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&x));
  }
  // C += A B on bf16 inputs, fp32 accumulators.
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct Elem<__half> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t x) { return __half22float2(*reinterpret_cast<__half2*>(&x)); }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// C_lo += A B_lo and C_hi += A B_hi for the two adjacent n8 tiles whose B operands one ldmatrix.x4
// returns (b_frag_pair / bt_frag_pair: b[0..1] the first tile, b[2..3] the second).
template <typename T>
__device__ __forceinline__ void mma_pair(float (&c_lo)[4], float (&c_hi)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[4]) {
  Elem<T>::mma(c_lo, a, b[0], b[1]);
  Elem<T>::mma(c_hi, a, b[2], b[3]);
}

// The A fragment of one k16 chunk from the fp32 C fragments of the two n8 tiles that make up that
// chunk (Note [mma fragments]), rounded to T: how P and dS feed the next matmul from registers.
template <typename T>
__device__ __forceinline__ void c_pair_to_a(uint32_t (&a)[4], const float (&c_lo)[4], const float (&c_hi)[4]) {
  a[0] = Elem<T>::pack(c_lo[0], c_lo[1]);
  a[1] = Elem<T>::pack(c_lo[2], c_lo[3]);
  a[2] = Elem<T>::pack(c_hi[0], c_hi[1]);
  a[3] = Elem<T>::pack(c_hi[2], c_hi[3]);
}

// ----------------------------------------------------------------------------- shared-memory loads

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
// Only lanes 0-15 supply addresses; lanes 16-31 pass a valid one anyway.
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(p)));
}

// Fragment addresses for a 16x16 block at (row0, col0) of a row-major shared tile with `ld` elements
// per row; see Note [mma fragments].
//  - a_frag: the A operand of a row-major matrix (rows = M).
//  - b_frag_pair: B operands of two n8 tiles when the tile is stored n-major (rows = N, cols = K), as K
//    is for S = Q K^T; r0,r1 = (b0,b1) of rows row0..+7, r2,r3 = those of rows row0+8..+15.
//  - bt_frag_pair (use with .trans): B operands of two n8 tiles when stored k-major (rows = K,
//    cols = N), as V is for O = P V; r0,r1 = cols col0..+7, r2,r3 = cols col0+8..+15.
template <typename T>
__device__ __forceinline__ const T* a_frag(const T* s, int ld, int row0, int col0, int lane) {
  return s + (row0 + (lane % 8) + ((lane / 8) % 2) * 8) * ld + col0 + (lane / 16) * 8;
}
template <typename T>
__device__ __forceinline__ const T* b_frag_pair(const T* s, int ld, int row0, int col0, int lane) {
  return s + (row0 + (lane % 8) + (lane / 16) * 8) * ld + col0 + ((lane / 8) % 2) * 8;
}
template <typename T>
__device__ __forceinline__ const T* bt_frag_pair(const T* s, int ld, int row0, int col0, int lane) {
  return s + (row0 + (lane % 8) + ((lane / 8) % 2) * 8) * ld + col0 + (lane / 16) * 8;
}
// A operand of M^T where M is stored row-major with rows = K and cols = M (dS^T stored [key][query]
// read as dS): matrices (k0,m0), (k0,m0+8), (k0+8,m0), (k0+8,m0+8), loaded with .trans.
template <typename T>
__device__ __forceinline__ const T* at_frag(const T* s, int ld, int k0, int m0, int lane) {
  return s + (k0 + (lane % 8) + (lane / 16) * 8) * ld + m0 + ((lane / 8) % 2) * 8;
}

// ----------------------------------------------------------------------------- async copies

// 16-byte global->shared copy; when !valid the destination is zero-filled and nothing is read
// (src must still be a mapped address, so callers pass the tensor's base).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Copies rows [row0, row0 + kRows) of a (n_rows, D) matrix with `stride` elements per row into a
// shared tile with kLd elements per row; rows past n_rows become zeros (sequence tails), so padded
// keys contribute exp(-inf)*0 and padded values never inject garbage (NaN) into P V.
// The trip count is a compile-time constant (thread tid copies chunks tid, tid + kThreads, ...), so the
// loop unrolls into straight-line code: as a runtime loop it cost ~150 instructions per thread per tile
// in the backward (SASS of v2, docs/flash_notes.md v3).
template <int kRows, int D, int kLd, int kThreads, typename T>
__device__ __forceinline__ void load_rows(T* s, const T* g, int64_t stride, int row0, int n_rows, int tid) {
  constexpr int kChunksPerRow = D / 8;  // 16-byte chunks of 8 elements
  constexpr int kChunks = kRows * kChunksPerRow;
  constexpr int kIters = (kChunks + kThreads - 1) / kThreads;
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const int c = tid + i * kThreads;
    if (kChunks % kThreads == 0 || c < kChunks) {
      const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
      const bool valid = row0 + r < n_rows;
      const T* src = valid ? g + (row0 + r) * stride + col : g;
      cp_async16(s + r * kLd + col, src, valid);
    }
  }
}

// Copies kRows floats starting at row0 (zeros past n_rows).
template <int kRows, int kThreads>
__device__ __forceinline__ void load_floats(float* s, const float* g, int row0, int n_rows, int tid) {
#pragma unroll
  for (int i = 0; i < (kRows + kThreads - 1) / kThreads; ++i) {
    const int r = tid + i * kThreads;
    if (kRows % kThreads == 0 || r < kRows) {
      const bool valid = row0 + r < n_rows;
      cp_async4(s + r, valid ? g + row0 + r : g, valid);
    }
  }
}

// ----------------------------------------------------------------------------- reductions

// The four lanes of a quad (lane/4 equal) hold one row's values in mma C fragments.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}

}  // namespace lmscale::kernels::flash
