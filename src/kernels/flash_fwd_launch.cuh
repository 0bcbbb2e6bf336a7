// Host side of the FlashAttention-2 forward: turns flash_tiles.h choices into kernel template arguments,
// raises the dynamic shared-memory limit, picks the grid and launches. Included only by the generated
// flash_fwd_hdim*_*.cu files, each of which instantiates one (dtype, head dim).
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/flash_fwd_kernel.cuh"
#include "kernels/flash_sequence.cuh"
#include "kernels/flash_tiles.h"

namespace lmscale::kernels {

// Defined (explicitly specialised) once per (T, D) in a generated .cu file; flash_api.cu dispatches.
template <typename T, int D>
void run_flash_fwd_(const FlashParams& p, cudaStream_t stream);

namespace flash {

// One tile configuration (flash_tiles.h picks the shipped one; tools/flash_probe.cu times others).
template <typename T, int D, int kBlockM, int kBlockN, int kWarps, bool Masked>
void launch_flash_fwd_tiles(const FlashParams& p, cudaStream_t stream) {
  constexpr int kSmem = flash_tiles::fwd_smem_bytes(D, kBlockM, kBlockN);
  static_assert(kSmem <= flash_tiles::kMaxSmemBytes, "tiles exceed the shared memory of one block");
  static_assert(flash_tiles::padded_row_is_conflict_free(D), "shared rows must stay ldmatrix conflict-free");
  auto kernel = flash_fwd_kernel<T, D, kBlockM, kBlockN, kWarps, Masked>;
  if (kSmem > 48 * 1024)
    LMSCALE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const int batch_heads = p.batch * p.heads;
  const int m_blocks = (p.seqlen_q + kBlockM - 1) / kBlockM;
  check_grid_y(m_blocks, "flash_fwd");
  dim3 grid(batch_heads, m_blocks);  // Note [grid order] in flash_fwd_kernel.cuh
  kernel<<<grid, kWarps * 32, kSmem, stream>>>(p);
  LMSCALE_CUDA_CHECK_LAUNCH("flash_fwd_kernel");
}

template <typename T, int D, bool Masked>
void launch_flash_fwd(const FlashParams& p, cudaStream_t stream) {
  launch_flash_fwd_tiles<T, D, flash_tiles::fwd_block_m(D), flash_tiles::fwd_block_n(D), flash_tiles::fwd_warps(D),
                         Masked>(p, stream);
}

template <typename T, int D>
void run_flash_fwd_hdim(const FlashParams& p, cudaStream_t stream) {
  if (flash_masked(p))
    launch_flash_fwd<T, D, true>(p, stream);
  else
    launch_flash_fwd<T, D, false>(p, stream);
}

}  // namespace flash
}  // namespace lmscale::kernels
