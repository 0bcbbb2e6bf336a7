// Host side of the sm_90a FlashAttention path: whether it applies, the TMA tensor maps, the launch.
#include "kernels/hopper/flash_hopper.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <mutex>
#include <stdexcept>

#include "kernels/cuda_check.h"
#include "kernels/hopper/flash_fwd_hopper.cuh"

namespace lmscale::kernels::hopper {

template <typename T, int D>
void launch_fwd(const FwdMaps& maps, const FlashParams& p, cudaStream_t stream);

namespace {

// cuTensorMapEncodeTiled lives in the driver; the runtime hands out its entry point, so lmscale needs
// no -lcuda (and CPU-only machines never call this).
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiledFn encode_tiled() {
  static EncodeTiledFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    LMSCALE_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || !f)
      throw std::runtime_error("flash hopper: the CUDA driver has no cuTensorMapEncodeTiled (needs CUDA 12+ driver)");
    return reinterpret_cast<EncodeTiledFn>(f);
  }();
  return fn;
}

// A 4-D map (d, row, head, batch) over one of q / k / v with boxes of `box_cols` x `box_rows`.
// Returns false (map untouched) when TMA cannot describe the strides.
bool make_map(CUtensorMap* map, const FlashParams& p, const void* ptr, int rows, int64_t row_stride,
              int64_t head_stride, int64_t batch_stride, int box_cols, int box_rows, int swizzle_bytes) {
  constexpr int64_t kElem = 2;
  // A size-1 dimension's stride is never used; TMA still wants it 16-byte aligned.
  if (p.heads == 1) head_stride = row_stride * rows;
  if (p.batch == 1) batch_stride = head_stride * p.heads;
  const cuuint64_t dims[4] = {cuuint64_t(p.head_dim), cuuint64_t(rows), cuuint64_t(p.heads), cuuint64_t(p.batch)};
  const cuuint64_t strides[3] = {cuuint64_t(row_stride * kElem), cuuint64_t(head_stride * kElem),
                                 cuuint64_t(batch_stride * kElem)};
  for (cuuint64_t s : strides)
    if (s % 16 != 0 || s >= (cuuint64_t(1) << 40)) return false;
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
  const cuuint32_t box[4] = {cuuint32_t(box_cols), cuuint32_t(box_rows), 1, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const CUresult r = encode_tiled()(
      map, p.dtype == FlashDtype::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
      const_cast<void*>(ptr), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      swizzle_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS;
}

template <typename T, int D>
bool make_fwd_maps(FwdMaps* maps, const FlashParams& p) {
  using C = FwdConfig<T, D>;
  return make_map(&maps->q, p, p.q, p.seqlen_q, p.q_row_stride, p.q_head_stride, p.q_batch_stride, C::kSwizzleElems,
                  C::kBlockM, C::kSwizzleBytes) &&
         make_map(&maps->k, p, p.k, p.seqlen_k, p.k_row_stride, p.k_head_stride, p.k_batch_stride, C::kSwizzleElems,
                  C::kBlockN, C::kSwizzleBytes) &&
         make_map(&maps->v, p, p.v, p.seqlen_k, p.v_row_stride, p.v_head_stride, p.v_batch_stride, C::kSwizzleElems,
                  C::kBlockN, C::kSwizzleBytes);
}

// Builds the maps for p's (dtype, head dim) and, when `stream` is given, launches. False when the head
// dim has no Hopper kernel or the maps cannot be built.
template <typename T>
bool fwd_for_dtype(const FlashParams& p, cudaStream_t stream, bool launch) {
  FwdMaps maps;
  switch (p.head_dim) {
#define LMSCALE_HOPPER_CASE(D)                       \
  case D:                                            \
    if (!make_fwd_maps<T, D>(&maps, p)) return false; \
    if (launch) launch_fwd<T, D>(maps, p, stream);   \
    return true;
    LMSCALE_HOPPER_CASE(64)
    LMSCALE_HOPPER_CASE(80)
    LMSCALE_HOPPER_CASE(128)
#undef LMSCALE_HOPPER_CASE
    default: return false;
  }
}

bool fwd_dispatch(const FlashParams& p, cudaStream_t stream, bool launch) {
  return p.dtype == FlashDtype::kBF16 ? fwd_for_dtype<__nv_bfloat16>(p, stream, launch)
                                      : fwd_for_dtype<__half>(p, stream, launch);
}

// sm_90a code runs on compute capability 9.0 only (not on later archs): asked once per device.
bool device_is_sm90() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  static std::mutex mu;
  static int cached[64] = {};  // 0 unknown, 1 yes, 2 no
  std::lock_guard<std::mutex> lock(mu);
  if (dev < 0 || dev >= 64) return false;
  if (cached[dev] == 0) {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    cached[dev] = major == 9 && minor == 0 ? 1 : 2;
  }
  return cached[dev] == 1;
}

}  // namespace

std::string fwd_unsupported_reason(const FlashParams& p) {
  if (p.head_dim != 64 && p.head_dim != 80 && p.head_dim != 128)
    return "head_dim " + std::to_string(p.head_dim) + " has no Hopper kernel (64, 80, 128 do)";
  if (p.is_causal && p.seqlen_q != p.seqlen_k) return "causal attention needs seqlen_q == seqlen_k";
  if (!device_is_sm90()) return "the current device is not sm_90 (the kernels are sm_90a code)";
  if (!fwd_dispatch(p, nullptr, false))
    return "q/k/v strides or base addresses are not 16-byte multiples, which TMA needs";
  return {};
}

void run_fwd(const FlashParams& p, void* stream) {
  if (!fwd_dispatch(p, static_cast<cudaStream_t>(stream), true))
    throw std::runtime_error("run_flash_fwd (hopper): " + fwd_unsupported_reason(p));
}

}  // namespace lmscale::kernels::hopper
