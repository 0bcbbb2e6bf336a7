// Device helpers shared by the memory-bound fused kernels (RMSNorm + residual, SwiGLU,
// cross-entropy): fp32 conversion of bf16/fp32 elements, packed loads and stores of N elements in
// one instruction, and block-wide reductions. Header-only, no ATen.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/fused_dtype.h"

namespace lmscale::kernels::fused {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// v as stored in T and read back: the value a later reader of a T tensor sees.
template <typename T>
__device__ __forceinline__ float rounded(float v) {
  return to_float(from_float<T>(v));
}

// N elements moved by one load/store instruction (N · sizeof(T) ≤ 16 bytes; the pointer aligned to it).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <int N, typename T>
__device__ __forceinline__ void load(const T* p, float (&out)[N]) {
  const Pack<T, N> pk = *reinterpret_cast<const Pack<T, N>*>(p);
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = to_float(pk.v[i]);
}

template <int N, typename T>
__device__ __forceinline__ void store(T* p, const float (&in)[N]) {
  Pack<T, N> pk;
#pragma unroll
  for (int i = 0; i < N; ++i) pk.v[i] = from_float<T>(in[i]);
  *reinterpret_cast<Pack<T, N>*>(p) = pk;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32), returned to every thread. `scratch` holds 32
// floats in shared memory; it may be reused right after the call (the leading barrier protects it).
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = warp_sum(lane < warps ? scratch[lane] : 0.f);
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  return scratch[0];
}

// Log-sum-exp state (running max m, Σ exp(x − m)); merging two is exact up to rounding.
struct MaxSum {
  float m, s;
};
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

// merge() over the block, returned to every thread. `scratch`: 64 floats of shared memory.
__device__ __forceinline__ MaxSum block_merge(MaxSum v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = merge(v, MaxSum{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)});
  __syncthreads();
  if (lane == 0) scratch[warp] = v.m, scratch[32 + warp] = v.s;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? MaxSum{scratch[lane], scratch[32 + lane]} : MaxSum{-INFINITY, 0.f};
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      v = merge(v, MaxSum{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)});
    if (lane == 0) scratch[0] = v.m, scratch[32] = v.s;
  }
  __syncthreads();
  return {scratch[0], scratch[32]};
}

// Host side: calls f(Tag<T>{}) with T the element type that `d` names.
template <typename T>
struct Tag {
  using type = T;
};
template <typename F>
void with_type(FusedDtype d, F&& f) {
  if (d == FusedDtype::kBF16) f(Tag<__nv_bfloat16>{});
  else f(Tag<float>{});
}

// Host side: f(Tag<A>{}, Tag<B>{}, Tag<C>{}) with A, B, C the element types that a, b, c name.
template <typename F>
void with_types(FusedDtype a, FusedDtype b, FusedDtype c, F&& f) {
  with_type(a, [&](auto ta) {
    with_type(b, [&](auto tb) { with_type(c, [&](auto tc) { f(ta, tb, tc); }); });
  });
}

// Host side: whether p is aligned to `bytes`.
inline bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Threads per block for a row of `items` vectors: one vector per thread up to 512 threads, a warp at least.
inline int threads_for_row(int64_t items) {
  int64_t t = (items + 31) / 32 * 32;
  return static_cast<int>(t < 32 ? 32 : t > 512 ? 512 : t);
}

}  // namespace lmscale::kernels::fused
