// The three launches of the Hopper backward, in order: the mma.sync backward's preprocess (D =
// rowsum(dO ∘ O); dq_accum zeroed where the main kernel adds rather than first-stores: everywhere with neither
// p.dq_tile_ticket nor p.dq_semaphore, else a packed sequence's last partial tile: Note [dQ first store]), the sm_90a main kernel (hopper::run_bwd, compiled in the sm_90a
// library), and the mma.sync backward's dq_accum -> dq conversion. Included by flash_api.cu, whose
// translation unit is built for every architecture of the build: the two shared kernels are instantiated
// there, never in the sm_90a-only library (one kernel registered from two fat binaries with different
// architectures would be ambiguous). tools/flash_hopper_probe.cu includes it as well.
#pragma once
#include <cuda_runtime.h>

#include "kernels/cuda_check.h"
#include "kernels/flash_bwd_kernel.cuh"
#include "kernels/flash_head_dims.h"
#include "kernels/hopper/flash_hopper.h"
#include "kernels/hopper/flash_hopper_tiles.h"

namespace lmscale::kernels::hopper {

// `main_kernel(p, stream)` launches the main kernel (hopper::run_bwd, or a probe's variant). It leaves dq_accum's
// 8-column groups in the order of Note [dQ pairs split] (flash_bwd_hopper.cuh), which the conversion restores.
template <typename T, int D, typename MainKernel>
void run_bwd_steps(const FlashParams& p, cudaStream_t stream, MainKernel&& main_kernel) {
  check_grid_y(flash::flash_bwd_preprocess_blocks(p), "flash_bwd_preprocess_kernel");
  // Note [dQ first store]: a packed sequence's last partial query tile adds (its rows are zeroed first).
  const int first_store_rows = !p.dq_tile_ticket && !p.dq_semaphore ? flash::kDqAddsEverywhere
                               : flash_varlen(p)                    ? kBwdBlockMMultiple
                                                                    : 1;
  flash::launch_flash_bwd_preprocess<T, D>(p, stream, first_store_rows);
  LMSCALE_CUDA_CHECK_LAUNCH("flash_bwd_preprocess_kernel");
  main_kernel(p, stream);
  flash::launch_flash_bwd_convert_dq<T, D, /*kPairsSplit=*/true>(p, stream);
  LMSCALE_CUDA_CHECK_LAUNCH("flash_bwd_convert_dq_kernel");
  if (p.dkv_accum) {  // grouped heads split over blocks: dK, dV from their fp32 sums
    flash::launch_flash_bwd_convert_dkv<T, D>(p, stream);
    LMSCALE_CUDA_CHECK_LAUNCH("flash_bwd_convert_dkv_kernel");
  }
}

// The whole Hopper backward at any head dim of HopperHeadDims (bwd_unsupported_reason(p) must be empty).
template <typename T>
void run_bwd_all_steps(const FlashParams& p, cudaStream_t stream) {
  auto main_kernel = [](const FlashParams& q, cudaStream_t s) { run_bwd(q, s); };
  with_head_dim_or_throw(HopperHeadDims{}, p.head_dim, "run_flash_bwd (hopper)", "Hopper",
                         [&](auto d) { run_bwd_steps<T, decltype(d)::value>(p, stream, main_kernel); });
}

}  // namespace lmscale::kernels::hopper
