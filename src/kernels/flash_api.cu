// Runtime dispatch of the FlashAttention-2 entry points (flash_params.h): dtype and head dim become
// template arguments here, limited to the instantiations this build holds: the X-macro lists of
// kernels/flash_variants.h, which CMake writes from LMSCALE_FA_HEADDIMS / LMSCALE_FA_DTYPES.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/flash_params.h"
#include "kernels/flash_variants.h"

namespace lmscale::kernels {

template <typename T, int D>
void run_flash_fwd_(const FlashParams& p, cudaStream_t stream);
template <typename T, int D>
void run_flash_bwd_(const FlashParams& p, cudaStream_t stream);

namespace {

// Element type of each FlashDtype, for the dtypes the build lists.
template <FlashDtype>
struct FlashElement;
template <>
struct FlashElement<FlashDtype::kBF16> {
  using type = __nv_bfloat16;
};
template <>
struct FlashElement<FlashDtype::kFP16> {
  using type = __half;
};

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
    LMSCALE_FA_FOR_EACH_HEAD_DIM(LMSCALE_FA_CASE)
    default: return false;
  }
#undef LMSCALE_FA_CASE
}

template <bool Backward>
void dispatch(const FlashParams& p, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  bool ran = false;
#define LMSCALE_FA_DTYPE_CASE(name, NAME) \
  if (p.dtype == FlashDtype::k##NAME)    \
    ran = dispatch_head_dim<typename FlashElement<FlashDtype::k##NAME>::type, Backward>(p, s);
  LMSCALE_FA_FOR_EACH_DTYPE(LMSCALE_FA_DTYPE_CASE)
#undef LMSCALE_FA_DTYPE_CASE
  if (!ran)
    throw std::runtime_error(std::string(Backward ? "run_flash_bwd" : "run_flash_fwd") + ": head_dim " +
                             std::to_string(p.head_dim) + " / dtype " +
                             (p.dtype == FlashDtype::kBF16 ? "bf16" : "fp16") +
                             " is not built; built: " + flash_supported_list());
}

bool head_dim_built(int d) {
#define LMSCALE_FA_HEAD_DIM_IS(D) || d == D
  return false LMSCALE_FA_FOR_EACH_HEAD_DIM(LMSCALE_FA_HEAD_DIM_IS);
#undef LMSCALE_FA_HEAD_DIM_IS
}

bool dtype_built(FlashDtype t) {
#define LMSCALE_FA_DTYPE_IS(name, NAME) || t == FlashDtype::k##NAME
  return false LMSCALE_FA_FOR_EACH_DTYPE(LMSCALE_FA_DTYPE_IS);
#undef LMSCALE_FA_DTYPE_IS
}

}  // namespace

bool flash_supported(FlashDtype dtype, int head_dim) { return dtype_built(dtype) && head_dim_built(head_dim); }

std::string flash_supported_list() {
  std::string dtypes, dims;
#define LMSCALE_FA_DTYPE_NAME(name, NAME) dtypes += (dtypes.empty() ? "" : "/") + std::string(#name);
  LMSCALE_FA_FOR_EACH_DTYPE(LMSCALE_FA_DTYPE_NAME)
#undef LMSCALE_FA_DTYPE_NAME
#define LMSCALE_FA_HEAD_DIM_NAME(D) dims += (dims.empty() ? "" : ", ") + std::to_string(D);
  LMSCALE_FA_FOR_EACH_HEAD_DIM(LMSCALE_FA_HEAD_DIM_NAME)
#undef LMSCALE_FA_HEAD_DIM_NAME
  return (dtypes.empty() ? "none" : dtypes) + " x head_dim {" + dims + "}";
}

void run_flash_fwd(const FlashParams& params, void* stream) { dispatch<false>(params, stream); }
void run_flash_bwd(const FlashParams& params, void* stream) { dispatch<true>(params, stream); }

}  // namespace lmscale::kernels
