// Host side of one Hopper forward variant (flash_fwd_hopper.cuh): its TMA tensor maps, the grid, the tile counter
// (the shared pieces: hopper_common.cuh). Instantiated per dtype in flash_fwd_hopper_{bf16,fp16}.cu
// for the shipped variants; tools/flash_hopper_probe.cu instantiates others to compare.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/hopper/flash_fwd_hopper.cuh"
#include "kernels/hopper/hopper_common.cuh"

namespace lmscale::kernels::hopper {

// Builds the maps and launches variant C on `stream`; false (nothing launched) when the maps cannot be built.
template <typename C>
bool launch_fwd(const FlashParams& p, cudaStream_t stream) {
  FwdMapsFor<C> maps;
  const FlashRowsView qv = flash_q_view(p), kv = flash_k_view(p);
  if constexpr (C::kTmaStoreO)  // O has Q's rows; one consumer group's 64 of them per box (Note [O by TMA store])
    if (!make_map(&maps.o, p, p.o, qv, p.o_row_stride, p.o_head_stride, p.o_batch_stride, C::kSwizzleElems, 64,
                  C::kSwizzleBytes))
      return false;
  if (!make_map(&maps.q, p, p.q, qv, p.q_row_stride, p.q_head_stride, p.q_batch_stride, C::kSwizzleElems, C::kBlockM,
                C::kSwizzleBytes) ||
      !make_map(&maps.k, p, p.k, kv, p.k_row_stride, p.k_head_stride, p.k_batch_stride, C::kSwizzleElems, C::kBlockN,
                C::kSwizzleBytes) ||
      !make_map(&maps.v, p, p.v, kv, p.v_row_stride, p.v_head_stride, p.v_batch_stride, C::kSwizzleElems, C::kBlockN,
                C::kSwizzleBytes))
    return false;
  // Note [persistent forward]: a block per SM (one fits, by its shared memory), no more than there are tiles.
  const int64_t tiles = fwd_tile_count<C::kBlockM>(p);
  // The kernel counts tiles in int, one step of blocks (at most 65536) past the last.
  if (tiles > INT32_MAX - 65536)
    throw std::runtime_error("flash_fwd_hopper_kernel: " + std::to_string(tiles) +
                             " query tiles (batch x heads x tiles per sequence) exceed 2^31 - 2^16; split the call");
  if (tiles == 0) return true;
  const int blocks = static_cast<int>(std::min<int64_t>({tiles, current_sm_count(), 65536}));
  auto* kernel = kernel_for_mask<C>(p, flash_fwd_hopper_kernel<C, true>, flash_fwd_hopper_kernel<C, false>);
  if (p.fwd_tile_counter) LMSCALE_CUDA_CHECK(cudaMemsetAsync(p.fwd_tile_counter, 0, sizeof(int), stream));
  kernel<<<blocks, C::kThreads, C::kSmemBytes, stream>>>(maps, p);
  LMSCALE_CUDA_CHECK(cudaGetLastError());
  return true;
}

}  // namespace lmscale::kernels::hopper
