// Runtime dispatch of the FlashAttention entry points (flash_params.h): the kernel family (fp32, Hopper,
// mma.sync), then dtype and head dim become template arguments, limited to the instantiations this build
// holds: the lists of kernels/flash_variants.h, which CMake writes from LMSCALE_FA_HEADDIMS / _DTYPES.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/flash_fp32.h"
#include "kernels/flash_head_dims.h"
#include "kernels/flash_deterministic.h"
#include "kernels/flash_params.h"
#include "kernels/flash_sequence.cuh"
#include "kernels/flash_variants.h"
#include "kernels/sm_count.h"
#ifdef LMSCALE_FA_HOPPER
#include "kernels/hopper/flash_bwd_hopper_steps.cuh"
#include "kernels/hopper/flash_hopper.h"
#endif

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

// Runs the mma.sync kernel of (T, head dim) if the build holds that head dim; false otherwise.
template <typename T, bool Backward>
bool dispatch_head_dim(const FlashParams& p, cudaStream_t s) {
  return with_head_dim(BuiltHeadDims{}, p.head_dim, [&](auto d) {
    if constexpr (Backward)
      run_flash_bwd_<T, decltype(d)::value>(p, s);
    else
      run_flash_fwd_<T, decltype(d)::value>(p, s);
  });
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

bool dtype_built(FlashDtype t) {
#define LMSCALE_FA_DTYPE_IS(name, NAME) || t == FlashDtype::k##NAME
  return false LMSCALE_FA_FOR_EACH_DTYPE(LMSCALE_FA_DTYPE_IS);
#undef LMSCALE_FA_DTYPE_IS
}

}  // namespace

bool flash_supported(FlashDtype dtype, int head_dim) {
  if (dtype == FlashDtype::kFP32) return flash_fp32_supported(head_dim);  // fp32 path: flash_fp32.h
  return dtype_built(dtype) && BuiltHeadDims::contains(head_dim);
}

std::string flash_supported_list() {
  std::string dtypes;
#define LMSCALE_FA_DTYPE_NAME(name, NAME) dtypes += (dtypes.empty() ? "" : "/") + std::string(#name);
  LMSCALE_FA_FOR_EACH_DTYPE(LMSCALE_FA_DTYPE_NAME)
#undef LMSCALE_FA_DTYPE_NAME
  return (dtypes.empty() ? "none" : dtypes) + " x head_dim {" + BuiltHeadDims::str() + "}; fp32 x head_dim {" +
         FlashHeadDims::str() + "}";
}

// ---- Hopper path (wgmma, TMA): the sm_90a kernels of src/kernels/hopper/ where they apply (FlashParams::path).
namespace {
#ifdef LMSCALE_FA_HOPPER
// True when the Hopper kernels should run `p`; `why_not` is the direction's *_unsupported_reason. A forced
// Hopper path that cannot run throws, naming the reason.
bool hopper_chosen(const FlashParams& p, const char* entry, std::string (*why_not)(const FlashParams&)) {
  if (p.path == FlashPath::kMmaSync) return false;
  const std::string why = why_not(p);
  if (why.empty()) return true;
  if (p.path == FlashPath::kHopper) throw std::runtime_error(std::string(entry) + ": the Hopper path was forced but " + why);
  return false;
}

// True when the Hopper forward ran; false when the mma.sync kernels should.
bool run_hopper_fwd_if_chosen(const FlashParams& p, void* stream) {
  if (!hopper_chosen(p, "run_flash_fwd", hopper::fwd_unsupported_reason)) return false;
  hopper::run_fwd(p, stream);
  return true;
}

// True when the Hopper backward ran (preprocess, sm_90a main kernel, dQ conversion: run_bwd_steps).
// Auto takes it at every Hopper head dim: faster than the mma.sync backward at each one measured since
// backward v5 (docs/flash_notes.md).
bool run_hopper_bwd_if_chosen(const FlashParams& p, void* stream) {
  if (!hopper_chosen(p, "run_flash_bwd", hopper::bwd_unsupported_reason)) return false;
  const auto s = static_cast<cudaStream_t>(stream);
  if (p.dtype == FlashDtype::kBF16)
    hopper::run_bwd_all_steps<__nv_bfloat16>(p, s);
  else
    hopper::run_bwd_all_steps<__half>(p, s);
  return true;
}
#else
// No Hopper kernels in this build: the mma.sync kernels run, unless the Hopper path was forced.
bool hopper_not_built(const FlashParams& p, const char* entry) {
  if (p.path == FlashPath::kHopper)
    throw std::runtime_error(std::string(entry) + ": the Hopper path was forced but this build has no Hopper kernels "
                             "(configure with LMSCALE_FA_HOPPER=ON)");
  return false;
}
bool run_hopper_fwd_if_chosen(const FlashParams& p, void*) { return hopper_not_built(p, "run_flash_fwd"); }
bool run_hopper_bwd_if_chosen(const FlashParams& p, void*) { return hopper_not_built(p, "run_flash_bwd"); }
#endif
}  // namespace

void run_flash_fwd(const FlashParams& params, void* stream) {
  if (params.dtype == FlashDtype::kFP32) return run_flash_fp32_fwd(params, stream);  // fp32 path: flash_fp32.h
  if (run_hopper_fwd_if_chosen(params, stream)) return;
  dispatch<false>(params, stream);
}
void run_flash_bwd(const FlashParams& params, void* stream) {
  if (params.dtype == FlashDtype::kFP32) return run_flash_fp32_bwd(params, stream);  // fp32 path: flash_fp32.h
  if (run_hopper_bwd_if_chosen(params, stream)) return;
  if (params.dq_semaphore)
    throw std::runtime_error("run_flash_bwd: a deterministic dQ (dq_semaphore) was asked for, but the mma.sync "
                             "backward adds dQ with atomics; only the Hopper and fp32 backwards can honour it");
  dispatch<true>(params, stream);
}

namespace {
// hopper_chosen's answer without the forced path's error: whether the Hopper forward (or backward) takes `p`, for the
// queries below, which must agree with what run_flash_fwd / run_flash_bwd run.
bool hopper_applies(const FlashParams& p, bool backward) {
#ifdef LMSCALE_FA_HOPPER
  if (p.path == FlashPath::kMmaSync) return false;
  return (backward ? hopper::bwd_unsupported_reason(p) : hopper::fwd_unsupported_reason(p)).empty();
#else
  (void)p, (void)backward;
  return false;
#endif
}
}  // namespace

// Note [group split]. The Hopper backward's block walks the query tiles of the query heads of one K/V head, so with
// grouped heads there are group times fewer blocks than with as many K/V heads as query heads, each group times
// longer: 2 x 32q/4kv x 4096 x 64 gave 256 blocks on 132 SMs, the longest (key block 0, causal) alone a quarter of
// the kernel's work, and the backward ran 1.17 ms where cuDNN's took 1.03. Split so that at least 8 blocks per SM
// remain (the dense kernel's granularity at the same shape, at most), the parts adding their dK, dV into fp32 sums.
int flash_bwd_group_split(const FlashParams& p) {
  const int group = flash_group(p);
  if (group <= 1 || p.dq_semaphore || p.dtype == FlashDtype::kFP32) return 1;
#ifdef LMSCALE_FA_HOPPER
  if (!hopper_applies(p, /*backward=*/true)) return 1;
  const int64_t blocks = static_cast<int64_t>((p.seqlen_k + 127) / 128) * p.batch * flash_heads_k(p);
  const int64_t wanted = 8 * static_cast<int64_t>(current_sm_count());
  for (int split = 1; split < group; ++split)
    if (group % split == 0 && blocks * split >= wanted) return split;
  return group;
#else
  return 1;
#endif
}

bool flash_fwd_writes_every_row(const FlashParams& p) {
  return p.dtype != FlashDtype::kFP32 && hopper_applies(p, /*backward=*/false);
}

bool flash_bwd_writes_every_key_row(const FlashParams& p) {
  return p.dtype != FlashDtype::kFP32 && hopper_applies(p, /*backward=*/true);
}

bool flash_bwd_can_be_deterministic(const FlashParams& p) {
  return p.dtype == FlashDtype::kFP32 || hopper_applies(p, /*backward=*/true);
}

}  // namespace lmscale::kernels
