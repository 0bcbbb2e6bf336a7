// What the two Hopper FlashAttention kernels (flash_fwd_hopper.cuh, flash_bwd_hopper.cuh) share: the tile
// constants and aligned shared memory every kernel body starts with, the packing of fp32 pairs into T; on the host,
// the TMA tensor maps, the SM count and the mask switch with its shared-memory opt-in.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "kernels/cuda_check.h"
#include "kernels/flash_params.h"
#include "kernels/flash_sequence.cuh"
#include "kernels/hopper/hopper_ptx.cuh"
#include "kernels/hopper/recent_cache.h"
#include "kernels/sm_count.h"

// The names a kernel body of config C (FwdConfig, BwdConfig) uses for C's tiles, and its dynamic shared memory
// aligned to 1024 bytes (the swizzle pattern repeats every 1024 bytes; the descriptors assume atom-aligned bases).
#define LMSCALE_HOPPER_KERNEL_PREAMBLE(C)                                                    \
  using T = typename C::T;                                                                   \
  constexpr int D = C::D;                                                                    \
  constexpr int kBlockM = C::kBlockM, kBlockN = C::kBlockN, kStages = C::kStages;            \
  constexpr int kSwB = C::kSwizzleBytes, kSwE = C::kSwizzleElems, kChunks = C::kChunks;     \
  constexpr int kAtomBytes = 8 * kSwB;                                                       \
  extern __shared__ unsigned char smem_raw[];                                                \
  unsigned char* smem = align_1024(smem_raw)

namespace lmscale::kernels::hopper {

// Two fp32 values rounded to T (bf16 or fp16), packed low first: a wgmma A fragment's word, or two output elements.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    memcpy(&r, &v, 4);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    memcpy(&r, &v, 4);
  }
  return r;
}

// cuTensorMapEncodeTiled lives in the driver; the runtime hands out its entry point, so lmscale needs
// no -lcuda (and CPU-only machines never call this).
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiledFn encode_tiled() {
  static EncodeTiledFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    LMSCALE_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || !f)
      throw std::runtime_error("flash hopper: the CUDA driver has no cuTensorMapEncodeTiled (needs a CUDA 12+ driver)");
    return reinterpret_cast<EncodeTiledFn>(f);
  }();
  return fn;
}

// The arguments of cuTensorMapEncodeTiled that vary between calls, zero-padded: the key of Note [tensor
// map cache] (interleave, L2 promotion and out-of-bounds fill are the same for every map here).
struct TensorMapArgs {
  const void* ptr;
  cuuint64_t dims[5], strides[4];
  cuuint32_t box[5], elem_strides[5];
  int dtype, rank, swizzle;
};

// cuTensorMapEncodeTiled through this thread's cache of recent maps (Note [tensor map cache]).
inline bool encode_tiled_cached(CUtensorMap* map, CUtensorMapDataType dtype, cuuint32_t rank, const void* ptr,
                                const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                const cuuint32_t* elem_strides, CUtensorMapSwizzle swizzle) {
  constexpr auto kInterleave = CU_TENSOR_MAP_INTERLEAVE_NONE;
  constexpr auto kL2 = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  constexpr auto kOob = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;
  if (rank < 1 || rank > 5) return false;
  TensorMapArgs a;
  std::memset(&a, 0, sizeof a);
  a.ptr = ptr;
  std::memcpy(a.dims, dims, rank * sizeof(cuuint64_t));
  std::memcpy(a.strides, strides, (rank - 1) * sizeof(cuuint64_t));
  std::memcpy(a.box, box, rank * sizeof(cuuint32_t));
  std::memcpy(a.elem_strides, elem_strides, rank * sizeof(cuuint32_t));
  a.dtype = dtype;
  a.rank = static_cast<int>(rank);
  a.swizzle = swizzle;
  thread_local RecentCache<TensorMapArgs, CUtensorMap> cache;
  return cache.get(a, map, [&](CUtensorMap* out) {
    return encode_tiled()(out, dtype, rank, const_cast<void*>(ptr), dims, strides, box, elem_strides, kInterleave,
                          swizzle, kL2, kOob) == CUDA_SUCCESS;
  });
}

// A 4-D map (d, row, head, batch) over q, k or v (shape `view`: flash_q_view / flash_k_view) with boxes of
// box_cols x box_rows and the given swizzle. False when TMA cannot describe the tensor.
inline bool make_map(CUtensorMap* map, const FlashParams& p, const void* ptr, FlashRowsView view, int64_t row_stride,
                     int64_t head_stride, int64_t batch_stride, int box_cols, int box_rows, int swizzle_bytes) {
  constexpr int64_t kElem = 2;
  // A size-1 dimension's stride is never used; TMA still wants it a 16-byte multiple.
  if (view.rows == 1) row_stride = p.head_dim;
  if (view.heads == 1) head_stride = row_stride * view.rows;
  if (view.batch == 1) batch_stride = head_stride * view.heads;
  const cuuint64_t dims[4] = {cuuint64_t(p.head_dim), cuuint64_t(view.rows), cuuint64_t(view.heads),
                              cuuint64_t(view.batch)};
  const cuuint64_t strides[3] = {cuuint64_t(row_stride * kElem), cuuint64_t(head_stride * kElem),
                                 cuuint64_t(batch_stride * kElem)};
  for (cuuint64_t s : strides)
    if (s % 16 != 0 || s >= (cuuint64_t(1) << 40)) return false;
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
  const cuuint32_t box[4] = {cuuint32_t(box_cols), cuuint32_t(box_rows), 1, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  return encode_tiled_cached(
      map, p.dtype == FlashDtype::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, ptr, dims,
      strides, box, elem_strides, swizzle_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B);
}

// The kernel of C for the call's mask (`masked` when a mask bound applies, flash_masked), both instantiations opted
// in to C::kSmemBytes of dynamic shared memory on the first call.
template <typename C, typename Kernel>
Kernel kernel_for_mask(const FlashParams& p, Kernel masked, Kernel unmasked) {
  static const bool opted_in = [&] {
    LMSCALE_CUDA_CHECK(cudaFuncSetAttribute(masked, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
    LMSCALE_CUDA_CHECK(cudaFuncSetAttribute(unmasked, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
    return true;
  }();
  (void)opted_in;
  return flash_masked(p) ? masked : unmasked;
}

}  // namespace lmscale::kernels::hopper
