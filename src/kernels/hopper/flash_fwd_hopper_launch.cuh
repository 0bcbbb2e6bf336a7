// Launch of the Hopper forward kernel (flash_fwd_hopper.cuh) for one (dtype, head dim): grid, shared
// memory opt-in, causal switch. Instantiated per dtype in flash_fwd_hopper_{bf16,fp16}.cu.
#pragma once
#include <cuda_runtime.h>

#include "kernels/cuda_check.h"
#include "kernels/hopper/flash_fwd_hopper.cuh"

namespace lmscale::kernels::hopper {

template <typename T, int D, bool Causal>
void launch_fwd_(const FwdMaps& maps, const FlashParams& p, cudaStream_t stream) {
  using C = FwdConfig<T, D>;
  auto* kernel = flash_fwd_hopper_kernel<T, D, Causal>;
  static const bool opted_in = [&] {
    LMSCALE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
    return true;
  }();
  (void)opted_in;
  const dim3 grid(p.batch * p.heads, (p.seqlen_q + C::kBlockM - 1) / C::kBlockM);
  kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(maps, p);
  LMSCALE_CUDA_CHECK(cudaGetLastError());
}

template <typename T, int D>
void launch_fwd(const FwdMaps& maps, const FlashParams& p, cudaStream_t stream) {
  if (p.is_causal)
    launch_fwd_<T, D, true>(maps, p, stream);
  else
    launch_fwd_<T, D, false>(maps, p, stream);
}

}  // namespace lmscale::kernels::hopper
