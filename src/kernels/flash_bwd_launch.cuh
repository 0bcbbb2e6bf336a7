// Host side of the FlashAttention-2 backward: preprocess (D = rowsum(dO ⊙ O), zero the dQ accumulator),
// the main dK/dV/dQ kernel, then the dQ cast, all on one stream. Included only by the generated
// flash_bwd_hdim*_*.cu files.
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/flash_bwd_kernel.cuh"
#include "kernels/flash_tiles.h"

namespace lmscale::kernels {

template <typename T, int D>
void run_flash_bwd_(const FlashParams& p, cudaStream_t stream);

namespace flash {

template <typename T, int D, bool IsCausal>
void launch_flash_bwd(const FlashParams& p, cudaStream_t stream) {
  constexpr int kWarps = flash_tiles::bwd_warps(D);
  constexpr int kBlockM = flash_tiles::bwd_block_m(D);
  constexpr int kBlockN = flash_tiles::bwd_block_n(D);
  constexpr int kSmem = flash_tiles::bwd_smem_bytes(D);
  const int batch_heads = p.batch * p.heads;
  check_grid_y(batch_heads, "flash_bwd");

  constexpr int kPreThreads = 128;
  dim3 pre_grid((p.seqlen_q + kPreThreads - 1) / kPreThreads, batch_heads);
  flash_bwd_preprocess_kernel<T, D><<<pre_grid, kPreThreads, 0, stream>>>(p);
  LMSCALE_CUDA_CHECK_LAUNCH("flash_bwd_preprocess_kernel");

  auto kernel = flash_bwd_kernel<T, D, kBlockM, kBlockN, kWarps, IsCausal>;
  if (kSmem > 48 * 1024)
    LMSCALE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  dim3 grid((p.seqlen_k + kBlockN - 1) / kBlockN, batch_heads);
  kernel<<<grid, kWarps * 32, kSmem, stream>>>(p);
  LMSCALE_CUDA_CHECK_LAUNCH("flash_bwd_kernel");

  const int64_t chunks = static_cast<int64_t>(batch_heads) * p.seqlen_q * (D / 8);
  constexpr int kConvThreads = 256;
  flash_bwd_convert_dq_kernel<T, D>
      <<<static_cast<unsigned>((chunks + kConvThreads - 1) / kConvThreads), kConvThreads, 0, stream>>>(p);
  LMSCALE_CUDA_CHECK_LAUNCH("flash_bwd_convert_dq_kernel");
}

template <typename T, int D>
void run_flash_bwd_hdim(const FlashParams& p, cudaStream_t stream) {
  if (p.is_causal)
    launch_flash_bwd<T, D, true>(p, stream);
  else
    launch_flash_bwd<T, D, false>(p, stream);
}

}  // namespace flash
}  // namespace lmscale::kernels
