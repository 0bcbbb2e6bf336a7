// Host side of the Hopper backward's main kernel (flash_bwd_hopper.cuh): TMA maps for q, k, v and dout,
// the shared memory opt-in, the grid. The caller runs the preprocess (D; dq_accum zeroed or not) before and
// the dQ conversion after (flash_api.cu). Instantiated per dtype in flash_bwd_hopper_{bf16,fp16}.cu.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/hopper/flash_bwd_hopper.cuh"
#include "kernels/hopper/hopper_common.cuh"

namespace lmscale::kernels::hopper {

// The map the dQ writer reduces into (Note [dQ by TMA reduce]): dq_accum as fp32 (d, row, plane), one plane per
// (batch, head) dense and per head packed (flash_stat_rows / flash_stat_planes), boxes of 32 columns x 64 rows with
// the 128-byte swizzle; rows and columns past the end are skipped.
inline bool make_dq_accum_map(CUtensorMap* map, const FlashParams& p, int box_cols) {
  const cuuint64_t dims[3] = {cuuint64_t(p.head_dim), cuuint64_t(flash_stat_rows(p)), cuuint64_t(flash_stat_planes(p))};
  const cuuint64_t strides[2] = {cuuint64_t(p.head_dim) * 4, cuuint64_t(flash_stat_rows(p)) * p.head_dim * 4};
  const cuuint32_t box[3] = {cuuint32_t(box_cols), 64, 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  if (reinterpret_cast<uintptr_t>(p.dq_accum) % 16 != 0) return false;
  return encode_tiled_cached(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, p.dq_accum, dims, strides, box, elem_strides,
                             CU_TENSOR_MAP_SWIZZLE_128B);
}

// Note [bwd grid order] (flash_bwd_hopper.cuh): the largest power of two of K/V heads whose query heads' Q, dO
// (input dtype) and dq_accum (fp32) take at most 40 MB, under the H100's 50 MB of L2, at least one.
inline int bwd_heads_per_section(const FlashParams& p) {
  const int split = p.dkv_accum ? p.group_split : 1;
  const int64_t bytes_per_head = static_cast<int64_t>(p.seqlen_q) * p.head_dim * (2 + 2 + 4) * (flash_group(p) / split);
  const int64_t budget = int64_t(40) << 20;
  const int kv_heads = p.batch * flash_heads_k(p) * split;  // the blocks' (K/V head, part of its group) pairs
  int heads = 1;
  while (heads * 2 <= kv_heads && bytes_per_head * heads * 2 <= budget) heads *= 2;
  return heads;
}

// Builds the maps and launches the backward of config C on `stream`; false (nothing launched) when TMA
// cannot describe one of the tensors.
template <typename C>
bool launch_bwd(const FlashParams& p, cudaStream_t stream) {
  BwdMaps maps;
  if (!make_dq_accum_map(&maps.dq_accum, p, C::kDqChunkCols)) return false;
  const FlashRowsView qv = flash_q_view(p), kv = flash_k_view(p);
  if (!make_map(&maps.q, p, p.q, qv, p.q_row_stride, p.q_head_stride, p.q_batch_stride, C::kSwizzleElems, C::kBlockM,
                C::kSwizzleBytes) ||
      !make_map(&maps.dout, p, p.dout, qv, p.do_row_stride, p.do_head_stride, p.do_batch_stride, C::kSwizzleElems,
                C::kBlockM, C::kSwizzleBytes) ||
      !make_map(&maps.k, p, p.k, kv, p.k_row_stride, p.k_head_stride, p.k_batch_stride, C::kSwizzleElems, C::kBlockN,
                C::kSwizzleBytes) ||
      !make_map(&maps.v, p, p.v, kv, p.v_row_stride, p.v_head_stride, p.v_batch_stride, C::kSwizzleElems, C::kBlockN,
                C::kSwizzleBytes))
    return false;
  const int64_t blocks = bwd_block_count<C::kBlockN>(p, flash_heads_k(p) * (p.dkv_accum ? p.group_split : 1));
  if (blocks > 0x7fffffff) throw std::runtime_error("flash_bwd_hopper_kernel: " + std::to_string(blocks) + " blocks exceed the grid");
  auto* kernel = kernel_for_mask<C>(p, flash_bwd_hopper_kernel<C, true>, flash_bwd_hopper_kernel<C, false>);
  if (blocks == 0) return true;
  kernel<<<static_cast<unsigned>(blocks), C::kThreads, C::kSmemBytes, stream>>>(maps, p, bwd_heads_per_section(p));
  LMSCALE_CUDA_CHECK(cudaGetLastError());
  return true;
}

}  // namespace lmscale::kernels::hopper
