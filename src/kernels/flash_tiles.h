// Tile-size choices of the FlashAttention-2 kernels as plain constexpr functions of the head dim, so
// they are testable on CPU and read in one place. The launch templates turn them into traits.
#pragma once

namespace lmscale::kernels::flash_tiles {

// Every warp owns 16 rows (one m16 MMA tile); a block of kWarps warps owns 16*kWarps rows.
constexpr int kRowsPerWarp = 16;

// Forward: 128 query rows per block, 64 keys per step. For D <= 64, 4 warps own 32 rows each, so
// every K/V fragment read from shared memory feeds two MMAs (v1 had 8 warps x 16 rows: 2.39 ms fwd on
// the leaderboard config, docs/flash_notes.md); wider heads keep 8 x 16 rows, since 32 rows of O
// (D floats/thread) plus Q fragments would spill.
constexpr int fwd_warps(int head_dim) { return head_dim <= 64 ? 4 : 8; }
constexpr int fwd_block_m(int head_dim) { return 128; }
constexpr int fwd_block_n(int head_dim) { return 64; }

// Backward: a block owns 128 keys (8 warps x 16 keys; dK and dV for them live in registers, D/2
// floats each per thread) and walks query tiles of bwd_block_m rows. Wider head dims take shorter
// query tiles so S^T and dP^T (bwd_block_m/2 floats each per thread) still fit beside dK and dV.
// LMSCALE_FA_BWD_WARPS (compile-time, e.g. -DCMAKE_CUDA_FLAGS=-DLMSCALE_FA_BWD_WARPS=4) overrides the
// warp count for tuning runs: 4 warps = 64 keys per block, two blocks per SM, twice the dQ atomics.
// Measured on H100, leaderboard config: bwd 7.67 ms with 4 warps vs 7.33 ms with 8 (docs/flash_notes.md).
#ifndef LMSCALE_FA_BWD_WARPS
#define LMSCALE_FA_BWD_WARPS 8
#endif
constexpr int bwd_warps(int head_dim) { return LMSCALE_FA_BWD_WARPS; }
constexpr int bwd_block_n(int head_dim) { return kRowsPerWarp * bwd_warps(head_dim); }
constexpr int bwd_block_m(int head_dim) { return head_dim <= 64 ? 64 : 32; }

// Shared-memory rows are padded by 8 elements (16 bytes): for every supported D the 8 row addresses
// of one ldmatrix then fall into 8 distinct 16-byte bank groups (row stride in 16-byte units is odd).
constexpr int smem_row(int head_dim) { return head_dim + 8; }

constexpr bool padded_row_is_conflict_free(int head_dim) { return (smem_row(head_dim) * 2 / 16) % 2 == 1; }

constexpr int fwd_smem_bytes(int head_dim) {
  return 2 * (fwd_block_m(head_dim) + 2 * fwd_block_n(head_dim)) * smem_row(head_dim);
}
// K, V (block_n rows), Q and dO double-buffered (block_m rows), dS^T double-buffered (block_n x
// block_m, padded), and L, D per query row, double-buffered.
constexpr int bwd_smem_bytes(int head_dim) {
  return 2 * (2 * bwd_block_n(head_dim) + 4 * bwd_block_m(head_dim)) * smem_row(head_dim) +
         2 * 2 * bwd_block_n(head_dim) * (bwd_block_m(head_dim) + 8) + 4 * 4 * bwd_block_m(head_dim);
}

}  // namespace lmscale::kernels::flash_tiles
