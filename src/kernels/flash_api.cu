// Runtime dispatch of the FlashAttention-2 entry points (flash_params.h): dtype and head dim become
// template arguments here, limited to the instantiations this build holds (CMake defines
// LMSCALE_FA_HDIM<d> / LMSCALE_FA_<DTYPE> from LMSCALE_FA_HEADDIMS / LMSCALE_FA_DTYPES).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/flash_fp32.h"
#include "kernels/flash_params.h"

namespace lmscale::kernels {

template <typename T, int D>
void run_flash_fwd_(const FlashParams& p, cudaStream_t stream);
template <typename T, int D>
void run_flash_bwd_(const FlashParams& p, cudaStream_t stream);

namespace {

// Calls Fn<T, D> for the built head dims; false when D was not built.
template <typename T, bool Backward>
bool dispatch_head_dim(const FlashParams& p, cudaStream_t s) {
#define LMSCALE_FA_CASE(D)                         \
  case D:                                          \
    if (Backward)                                  \
      run_flash_bwd_<T, D>(p, s);                  \
    else                                           \
      run_flash_fwd_<T, D>(p, s);                  \
    return true;
  switch (p.head_dim) {
#ifdef LMSCALE_FA_HDIM16
    LMSCALE_FA_CASE(16)
#endif
#ifdef LMSCALE_FA_HDIM32
    LMSCALE_FA_CASE(32)
#endif
#ifdef LMSCALE_FA_HDIM64
    LMSCALE_FA_CASE(64)
#endif
#ifdef LMSCALE_FA_HDIM80
    LMSCALE_FA_CASE(80)
#endif
#ifdef LMSCALE_FA_HDIM128
    LMSCALE_FA_CASE(128)
#endif
    default: return false;
  }
#undef LMSCALE_FA_CASE
}

template <bool Backward>
void dispatch(const FlashParams& p, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  bool ran = false;
#ifdef LMSCALE_FA_BF16
  if (p.dtype == FlashDtype::kBF16) ran = dispatch_head_dim<__nv_bfloat16, Backward>(p, s);
#endif
#ifdef LMSCALE_FA_FP16
  if (p.dtype == FlashDtype::kFP16) ran = dispatch_head_dim<__half, Backward>(p, s);
#endif
  if (!ran)
    throw std::runtime_error(std::string(Backward ? "run_flash_bwd" : "run_flash_fwd") + ": head_dim " +
                             std::to_string(p.head_dim) + " / dtype " +
                             (p.dtype == FlashDtype::kBF16 ? "bf16" : "fp16") +
                             " is not built; built: " + flash_supported_list());
}

constexpr int kAllHeadDims[] = {16, 32, 64, 80, 128};

bool head_dim_built(int d) {
  switch (d) {
#ifdef LMSCALE_FA_HDIM16
    case 16: return true;
#endif
#ifdef LMSCALE_FA_HDIM32
    case 32: return true;
#endif
#ifdef LMSCALE_FA_HDIM64
    case 64: return true;
#endif
#ifdef LMSCALE_FA_HDIM80
    case 80: return true;
#endif
#ifdef LMSCALE_FA_HDIM128
    case 128: return true;
#endif
    default: return false;
  }
}

bool dtype_built(FlashDtype t) {
#ifdef LMSCALE_FA_BF16
  if (t == FlashDtype::kBF16) return true;
#endif
#ifdef LMSCALE_FA_FP16
  if (t == FlashDtype::kFP16) return true;
#endif
  return false;
}

}  // namespace

bool flash_supported(FlashDtype dtype, int head_dim) {
  if (dtype == FlashDtype::kFP32) return flash_fp32_supported(head_dim);  // fp32 path: flash_fp32.h
  return dtype_built(dtype) && head_dim_built(head_dim);
}

std::string flash_supported_list() {
  std::string dtypes, dims;
  if (dtype_built(FlashDtype::kBF16)) dtypes += "bf16";
  if (dtype_built(FlashDtype::kFP16)) dtypes += dtypes.empty() ? "fp16" : "/fp16";
  for (int d : kAllHeadDims)
    if (head_dim_built(d)) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
  return (dtypes.empty() ? "none" : dtypes) + " x head_dim {" + dims + "}";
}

void run_flash_fwd(const FlashParams& params, void* stream) {
  if (params.dtype == FlashDtype::kFP32) return run_flash_fp32_fwd(params, stream);  // fp32 path: flash_fp32.h
  dispatch<false>(params, stream);
}
void run_flash_bwd(const FlashParams& params, void* stream) {
  if (params.dtype == FlashDtype::kFP32) return run_flash_fp32_bwd(params, stream);  // fp32 path: flash_fp32.h
  dispatch<true>(params, stream);
}

}  // namespace lmscale::kernels
