// Host side of the FlashAttention-2 backward: preprocess (D = rowsum(dO ⊙ O), zero the dQ accumulator),
// the main dK/dV/dQ kernel, then the dQ cast, all on one stream. Included only by the generated
// flash_bwd_hdim*_*.cu files.
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/flash_bwd_kernel.cuh"
#include "kernels/flash_sequence.cuh"
#include "kernels/flash_tiles.h"

namespace lmscale::kernels {

template <typename T, int D>
void run_flash_bwd_(const FlashParams& p, cudaStream_t stream);

namespace flash {

// One tile configuration (flash_tiles.h picks the shipped one; tools/flash_probe.cu times others).
template <typename T, int D, int kBlockM, int kKT, int kWarps, bool Masked>
void launch_flash_bwd_tiles(const FlashParams& p, cudaStream_t stream) {
  constexpr int kBlockN = flash_tiles::kRowsPerWarp * kKT * kWarps;
  constexpr int kSmem = flash_tiles::bwd_smem_bytes(D, kBlockM, kBlockN);
  static_assert(kSmem <= flash_tiles::kMaxSmemBytes, "tiles exceed the shared memory of one block");
  const int kv_heads = p.batch * flash_heads_k(p);  // one block per K/V head: Note [grouped heads]
  const int n_blocks = (p.seqlen_k + kBlockN - 1) / kBlockN;
  const int pre_blocks = flash_bwd_preprocess_blocks(p);
  check_grid_y(n_blocks > pre_blocks ? n_blocks : pre_blocks, "flash_bwd");

  launch_flash_bwd_preprocess<T, D>(p, stream, kDqAddsEverywhere);
  LMSCALE_CUDA_CHECK_LAUNCH("flash_bwd_preprocess_kernel");

  auto kernel = flash_bwd_kernel<T, D, kBlockM, kKT, kWarps, Masked>;
  if (kSmem > 48 * 1024)
    LMSCALE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  kernel<<<dim3(kv_heads, n_blocks), kWarps * 32, kSmem, stream>>>(p);  // Note [grid order]
  LMSCALE_CUDA_CHECK_LAUNCH("flash_bwd_kernel");

  launch_flash_bwd_convert_dq<T, D>(p, stream);
  LMSCALE_CUDA_CHECK_LAUNCH("flash_bwd_convert_dq_kernel");
}

template <typename T, int D, bool Masked>
void launch_flash_bwd(const FlashParams& p, cudaStream_t stream) {
  launch_flash_bwd_tiles<T, D, flash_tiles::bwd_block_m(D), flash_tiles::bwd_key_tiles(D), flash_tiles::bwd_warps(D),
                         Masked>(p, stream);
}

template <typename T, int D>
void run_flash_bwd_hdim(const FlashParams& p, cudaStream_t stream) {
  if (flash_masked(p))
    launch_flash_bwd<T, D, true>(p, stream);
  else
    launch_flash_bwd<T, D, false>(p, stream);
}

}  // namespace flash
}  // namespace lmscale::kernels
