// Tile-size choices of the FlashAttention-2 kernels as plain constexpr functions of the head dim, so
// they are testable on CPU and read in one place. The launch templates turn them into traits.
#pragma once

namespace lmscale::kernels::flash_tiles {

// One m16 MMA tile: the unit of rows a warp owns.
constexpr int kRowsPerWarp = 16;

// Forward: 128 query rows per block, 64 keys per step. For D <= 64, 4 warps own 32 rows each, so
// every K/V fragment read from shared memory feeds two MMAs (v1 had 8 warps x 16 rows: 2.39 ms fwd on
// the leaderboard config, docs/flash_notes.md); wider heads keep 8 x 16 rows, since 32 rows of O
// (D floats/thread) plus Q fragments would spill.
constexpr int fwd_warps(int head_dim) { return head_dim <= 64 ? 4 : 8; }
constexpr int fwd_block_m(int head_dim) { return 128; }
constexpr int fwd_block_n(int head_dim) { return 64; }

// Backward (Note [bwd in transposed form], flash_bwd_kernel.cuh): a block owns bwd_block_n keys,
// kKT x 16 per warp, with dK and dV for them in registers (kKT * D/2 floats each per thread), and walks
// query tiles of bwd_block_m rows (S^T and dP^T: kKT * bwd_block_m / 2 floats each per thread).
// D <= 64: 4 warps x 32 keys, 32-query tiles, two blocks per SM; each Q / dO fragment feeds two MMAs.
// Measured on H100, leaderboard config (tools/flash_probe.cu, docs/flash_notes.md v3): 4.89 ms vs
// 5.97 ms for 8 warps x 16 keys with 64-query tiles and 7.0 ms for v2. Wider heads keep 16 keys per
// warp (2 x 16 x D/8 accumulators would spill): 8 warps, 32-query tiles (D = 128) or 64 (D = 80, so the
// ten n8 tiles of dQ split evenly over warps).
constexpr int bwd_key_tiles(int head_dim) { return head_dim <= 64 ? 2 : 1; }
constexpr int bwd_warps(int head_dim) { return head_dim <= 64 ? 4 : 8; }
constexpr int bwd_block_n(int head_dim) { return kRowsPerWarp * bwd_key_tiles(head_dim) * bwd_warps(head_dim); }
constexpr int bwd_block_m(int head_dim) { return head_dim <= 64 ? 32 : head_dim == 80 ? 64 : 32; }

// Shared-memory rows are padded by 8 elements (16 bytes): for every supported D the 8 row addresses
// of one ldmatrix then fall into 8 distinct 16-byte bank groups (row stride in 16-byte units is odd).
constexpr int smem_row(int head_dim) { return head_dim + 8; }

constexpr bool padded_row_is_conflict_free(int head_dim) { return (smem_row(head_dim) * 2 / 16) % 2 == 1; }

// Q (block_m rows), K and V (block_n rows each), padded.
constexpr int fwd_smem_bytes(int head_dim, int block_m, int block_n) {
  return 2 * (block_m + 2 * block_n) * smem_row(head_dim);
}
// K, V (block_n rows), Q and dO double-buffered (block_m rows), dS^T double-buffered (block_n x
// block_m, padded), and L, D per query row, double-buffered.
// Hopper's per-block limit for dynamic shared memory (227 KB); the launchers static_assert against it
// so a tile change that cannot launch fails to compile instead of failing at run time.
constexpr int kMaxSmemBytes = 227 * 1024;

constexpr int bwd_smem_bytes(int head_dim, int block_m, int block_n) {
  return 2 * (2 * block_n + 4 * block_m) * smem_row(head_dim) + 2 * 2 * block_n * (block_m + 8) + 4 * 4 * block_m;
}

}  // namespace lmscale::kernels::flash_tiles
