// FlashAttention backward for Hopper (sm_90a), docs/spec.md §3.5: the main kernel only (dK, dV in the
// input dtype, dQ stored or added in fp32 into p.dq_accum: Note [dQ first store]). The preprocess (D =
// rowsum(dO ∘ O)) and the dq_accum -> dq conversion run around it (flash_bwd_hopper_steps.cuh).
//
//   * one block per 128 keys: warpgroup 0 is the producer, warpgroups 1 and 2 are consumers owning 64
//     keys each, with dK and dV of their keys in registers for the whole block;
//   * producer: one thread loads K and V once, then Q and dO of every query tile by TMA into a ring of
//     kStages slots; a second warp writes L (in the exp2 domain) and D of the same rows into the slot; a
//     third warp adds each consumer's dQ tile into dq_accum with one TMA reduce-add per 32 columns
//     (Note [dQ by TMA reduce]), so no consumer waits on global memory;
//   * consumers, per query tile, in transposed form (keys on the wgmma M side, Note [bwd in transposed
//     form] in flash_bwd_kernel.cuh): S^T = K Q^T and dP^T = V dO^T (both operands in shared memory),
//     P^T = exp2(S^T scale - L), dS^T = P^T ∘ (dP^T - D) in registers; dV += P^T dO and dK += dS^T Q
//     with P^T / dS^T straight from registers; dS goes to shared memory once (stmatrix, transposed on the
//     store) for dQ = dS K over all 128 keys of the block (Note [dQ split]). Note [bwd issue order] says
//     which GEMM runs under which elementwise step.
//
// Layouts and descriptors are the forward's (Note [descriptors] in flash_fwd_hopper.cuh): tiles exactly as
// TMA writes them with the 128- or 64-byte swizzle; d = 80 is padded to 96 by TMA's zero fill.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <type_traits>

#include "kernels/flash_params.h"
#include "kernels/flash_sequence.cuh"
#include "kernels/hopper/flash_hopper_tiles.h"
#include "kernels/hopper/hopper_common.cuh"
#include "kernels/hopper/hopper_ptx.cuh"
#include "kernels/hopper/wgmma_ops.cuh"

namespace lmscale::kernels::hopper {

// kBlockM_: queries per tile, 64 or 128 (then S^T / dP^T are 64 x 128 per group and dQ's rows, not
// columns, split between the groups: Note [dQ split]). The shipped choice per head dim is
// BwdShipped below. kKRegSteps_: Note [K in registers]. kSkipBlind_: Note [blind group tiles].
template <typename T_, int D_, int kBlockM_, int kKRegSteps_ = 0, bool kSkipBlind_ = false>
struct BwdConfig {
  using T = T_;
  static constexpr int D = D_;
  static constexpr int kConsumers = 2;
  static constexpr int kKeysPerGroup = 64;  // one wgmma M per consumer warpgroup
  static constexpr int kBlockN = kKeysPerGroup * kConsumers;
  static constexpr int kBlockM = kBlockM_;  // queries per tile: the N of S^T and dP^T
  // d = 128 uses the 128-byte swizzle; 64 and 80 the 64-byte one (32-column chunks), so dQ's columns
  // can split between the two groups at a chunk boundary (kDqSplit).
  static constexpr int kSwizzleBytes = D == 128 ? 128 : 64;
  static constexpr int kSwizzleElems = kSwizzleBytes / 2;
  static constexpr int kDPad = (D + kSwizzleElems - 1) / kSwizzleElems * kSwizzleElems;
  static constexpr int kChunks = kDPad / kSwizzleElems;
  // k-steps of S^T = K Q^T and dP^T = V dO^T: the head dim, not its padding (the padded columns are TMA's
  // zeros and add nothing; d = 80 runs 5 k-steps, not 6).
  static constexpr int kKSteps = D / 16;
  // Note [K in registers]. Each consumer loads the first kKRegSteps 16-column k-steps of its 64 rows of K into
  // registers once per block (4 registers per k-step: 32 for all of d = 128), and those k-steps of
  // S^T = K Q^T run as RS wgmmas, reading only Q from shared memory. 0: K from shared memory.
  static constexpr int kKRegSteps = kKRegSteps_;
  static constexpr bool kKInRegs = kKRegSteps > 0;
  static constexpr bool kSkipBlind = kSkipBlind_;
  static constexpr int kQBytes = kBlockM * kDPad * 2;   // one Q (or dO) slot
  static constexpr int kKVBytes = kBlockN * kDPad * 2;  // K (or V) of the block
  static constexpr int kDSBytes = kBlockM * kKeysPerGroup * 2;  // one consumer's dS tile (128-byte rows)
  static constexpr int kRowBytes = kBlockM * 4;                 // L or D of one slot
  static constexpr int kThreads = 128 * (kConsumers + 1);
  // The warpgroup index broadcast as warp-uniform (flash_bwd_hopper_kernel). Measured sustained on an H100
  // (docs/flash_notes.md, backward v5.2; results/runs/2026-11-26-aa39c99-attention-v5.2): at d = 80 and 128 it is part of
  // the -1 to -2.4 %; at d = 64 the kernel without it is 3.8 % faster at 16k causal (2.983 against 3.086 ms,
  // fewer cycles per tile) and 0.5 % slower not causal, so d = 64 leaves the index to the compiler.
  static constexpr bool kUniformWarpgroup = D != 64;
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
  // Note [dQ split]. dQ = dS K over all 128 keys of the block, split between the two groups. 64-query
  // tiles split its columns: group 0 adds [0, kDqSplit), group 1 [kDqSplit, D) (32 | 32, 32 | 48, 64 | 64),
  // each start on a swizzle chunk; both compute kDqN columns (group 0's last 16 at d = 80 are discarded),
  // so both run the same wgmma (ptxas serialises wgmmas on paths it cannot prove uniform). 128-query tiles
  // split its rows: group g computes rows [64 g, 64 g + 64) of the tile, all D columns.
  static constexpr bool kDqRowSplit = kBlockM == 128;
  static constexpr int kDqSplit = kDqRowSplit ? D : D / 2 / kSwizzleElems * kSwizzleElems;
  static constexpr int kDqN = kDqRowSplit ? D : D - kDqSplit;
  // Note [dQ by TMA reduce]. Each group's fp32 dQ tile (64 rows x kDqN columns) is staged in shared
  // memory as 32-column chunks of 128-byte rows with the 128-byte swizzle, the box of dq_accum's tensor
  // map; the writer warp adds one chunk per TMA reduce. One staging tile per group: the group refills it
  // only once the writer has seen the previous reduce read it (named barriers kBarDqEmpty / kBarDqFull).
  static constexpr int kDqChunkCols = 32;
  static constexpr int kDqChunkBytes = 64 * kDqChunkCols * 4;
  static constexpr int kDqChunks = (kDqN + kDqChunkCols - 1) / kDqChunkCols;
  static constexpr int kDqStageBytes = kDqChunks * kDqChunkBytes;
  static constexpr int kFixedBytes = 2 * kKVBytes + 2 * kConsumers * kDSBytes + kConsumers * kDqStageBytes;
  static constexpr int kStageBytes = 2 * kQBytes + 2 * kRowBytes;
  static constexpr int kStagesFit = (227 * 1024 - 2048 - kFixedBytes) / kStageBytes;
  static constexpr int kStages = kStagesFit > 4 ? 4 : kStagesFit;
  // Shared memory (every tile 1024-byte aligned for the swizzle atoms): K, V, dS per consumer twice
  // (tiles alternate, Note [dS buffers]), the dQ staging per consumer, the Q and dO slots, then L and D
  // per slot, then the barriers.
  static constexpr int kOffV = kKVBytes;
  static constexpr int kOffDS = 2 * kKVBytes;
  static constexpr int kOffDQ = kOffDS + 2 * kConsumers * kDSBytes;
  static constexpr int kOffQ = kOffDQ + kConsumers * kDqStageBytes;
  static constexpr int kOffDO = kOffQ + kStages * kQBytes;
  static constexpr int kOffL = kOffDO + kStages * kQBytes;
  static constexpr int kOffDsum = kOffL + kStages * kRowBytes;
  static constexpr int kBarrierOffset = kOffDsum + kStages * kRowBytes;
  static constexpr int kSmemBytes = kBarrierOffset + (1 + 2 * kStages) * 8 + 1024;
  static_assert(kBlockM == 64 || kBlockM == 128, "query tiles of 64 or 128 rows");
  static_assert(!kKInRegs || kSwizzleBytes == 128, "K's fragments are loaded from the 128-byte swizzle (d = 128)");
  static_assert(kKRegSteps >= 0 && kKRegSteps <= kKSteps, "kKRegSteps: 0 to D / 16 k-steps of K in registers");
  static_assert(kStages >= 2, "Q/dO need double buffering");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one block");
  static_assert(D % 16 == 0 && D <= 256 && kDqSplit % 16 == 0 && kDqN % 16 == 0, "wgmma N is a multiple of 8");
  static_assert(kDqRowSplit || kDqSplit % kDqChunkCols == 0, "each group's dQ columns start on a reduce chunk");
};

// The shipped tile per head dim: bwd_block_m of flash_hopper_tiles.h (measured there, checked there).
template <typename T, int D>
using BwdShipped = BwdConfig<T, D, bwd_block_m(D), bwd_k_reg_steps(D)>;

struct BwdMaps {
  CUtensorMap q, k, v, dout, dq_accum;
};

// Named barriers (id 0 is __syncthreads): both consumers' dS of a tile written; per consumer group g, its
// dQ staging filled (kBarDqFull + g) and free again (kBarDqEmpty + g), each between the group's 128
// threads and the writer warp.
constexpr int kBarDs = 1, kBarDqFull = 2, kBarDqEmpty = 4, kDqBarThreads = 128 + 32;

// Note [bwd grid order]. A 1-D grid. The (batch, head) pairs are cut into L2 sections of
// heads_per_section heads whose Q, dO and dq_accum fit in L2 together (bwd_heads_per_section); a section's
// blocks run before the next section's, key block 0 of every head of the section first, then key block 1,
// and so on. Key block 0 has the most causal query tiles, so the longest blocks start first; and the blocks
// in flight at once share a few heads, so every Q / dO tile read from HBM is reused from L2 by the other key
// blocks of its head (with all heads in flight at once, as a (heads, key blocks) grid does at short
// sequences, each key block streamed its head's Q and dO from HBM again: docs/flash_notes.md, backward v5).
struct BwdTile {
  int n_block, bh;
};
__host__ __device__ inline BwdTile bwd_tile(int linear, int n_blocks, int batch_heads, int heads_per_section) {
  const int section = linear / (n_blocks * heads_per_section);
  const int first_bh = section * heads_per_section;
  const int heads = batch_heads - first_bh < heads_per_section ? batch_heads - first_bh : heads_per_section;
  const int rest = linear - section * n_blocks * heads_per_section;
  return {rest / heads, first_bh + rest % heads};
}

// Packed batches walk the key tiles the batch has (Note [packed tile slots], flash_sequence.cuh): block linear is
// slot linear / kv_blocks of every (K/V head, part of its group) in turn, a sequence's key block 0 (its longest,
// causal) first. Dense calls: bwd_tile. False for a slot holding no tile.
template <int kBlockN>
__host__ __device__ inline int64_t bwd_block_count(const FlashParams& p, int kv_blocks) {
  return kv_blocks * flash_row_tiles(p, p.total_k, p.seqlen_k, kBlockN);
}
template <int kBlockN>
__device__ __forceinline__ bool bwd_block_tile(const FlashParams& p, int linear, int kv_blocks, int heads_per_section,
                                               BwdTile& tile) {
  if (!flash_varlen(p)) {
    tile = bwd_tile(linear, (p.seqlen_k + kBlockN - 1) / kBlockN, p.batch * kv_blocks, heads_per_section);
    return true;
  }
  const int slot = linear / kv_blocks;
  int b = 0;
  if (!flash_packed_tile(p.cu_seqlens_k, p.batch, kBlockN, slot, b, tile.n_block)) return false;
  tile.bh = b * kv_blocks + (linear - slot * kv_blocks);
  return true;
}

template <typename C, bool Masked>
__global__ void __launch_bounds__(C::kThreads, 1) flash_bwd_hopper_kernel(const __grid_constant__ BwdMaps maps,
                                                                          const FlashParams p, int heads_per_section) {
  LMSCALE_HOPPER_KERNEL_PREAMBLE(C);
  unsigned char* sK = smem;
  unsigned char* sV = smem + C::kOffV;
  unsigned char* sQ = smem + C::kOffQ;
  unsigned char* sdO = smem + C::kOffDO;
  float* sL = reinterpret_cast<float*>(smem + C::kOffL);
  float* sDsum = reinterpret_cast<float*>(smem + C::kOffDsum);
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + C::kBarrierOffset);
  uint64_t* kv_full = bar;
  uint64_t* q_full = bar + 1;         // Q, dO (TMA bytes) and L, D (32 arrivals of the row warp) landed
  // Every consumer thread is done with the slot: its wgmmas that read Q / dO completed and its reads of L
  // and D are ordered before its arrival (one arrival per thread, so no thread's reads are left to a warp
  // barrier; compute-sanitizer's racecheck flagged the L / D rewrite when one lane arrived per warp).
  uint64_t* q_empty = q_full + kStages;

  // One block per (K/V head, 128 keys), walking the query tiles of every query head of its group (Note [grouped
  // heads] in flash_bwd_kernel.cuh): iteration it is tile m_first + it % m_count of query head
  // hk * group + it / m_count, the same in the producer, the row warp, the writer and the consumers.
  // With group_split > 1 (FlashParams::dkv_accum) `split` blocks share a group, each walking heads_per_block of
  // its query heads and adding its dK, dV into the fp32 sums.
  const int heads_k = flash_heads_k(p), group = flash_group(p);
  const int split = p.dkv_accum ? p.group_split : 1, heads_per_block = group / split;
  BwdTile tile;
  if (!bwd_block_tile<kBlockN>(p, blockIdx.x, heads_k * split, heads_per_section, tile)) return;
  const int n_block = tile.n_block, b = tile.bh / (heads_k * split), hk = tile.bh / split % heads_k;
  const int first_head = hk * group + tile.bh % split * heads_per_block;
  const int n0 = n_block * kBlockN;
  const FlashSeq seq = flash_seq(p, b);
  // Query tiles holding a query that sees a key of the block (Note [mask tiles], flash_fwd_kernel.cuh).
  const int m_first = Masked ? seq.query_begin(n0) / kBlockM : 0;
  const int m_stop = Masked ? seq.query_end(min(n0 + kBlockN, seq.len_k)) : seq.len_q;
  const int m_count = m_stop > m_first * kBlockM ? (m_stop - m_first * kBlockM + kBlockM - 1) / kBlockM : 0;
  const int iters = m_count * heads_per_block;
  // (query head, query tile) of an iteration, stepped one iteration at a time: no division in the producer
  // warpgroup's 24 registers.
  struct Walk {
    int h, m;
  };
  const Walk walk0{first_head, m_first};
  auto step_walk = [&](Walk& w) {
    if (++w.m == m_first + m_count) w.m = m_first, ++w.h;
  };
  // TMA coordinates: packed batches are one (total, H, D) tensor, their sequences rows of it; dq_accum's planes
  // are (batch, head) dense and heads packed (make_dq_accum_map).
  const int q_row = static_cast<int>(seq.q_row0), k_row = static_cast<int>(seq.k_row0);
  const int tma_b = flash_map_batch(p, b);
  // With kUniformWarpgroup the index is broadcast from lane 0, so the compiler knows it is warp-uniform and
  // keeps what derives from it (the group's descriptor bases) in uniform registers instead of moving it
  // there before every wgmma (BwdConfig::kUniformWarpgroup says where that pays).
  const int warpgroup = C::kUniformWarpgroup ? __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0)
                                             : static_cast<int>(threadIdx.x / 128);

  // The part of dQ group g adds (Note [dQ split]): first row in the tile, first column, columns it adds.
  auto dq_row0 = [](int g) { return C::kDqRowSplit ? g * 64 : 0; };
  auto dq_col0 = [](int g) { return C::kDqRowSplit || g == 0 ? 0 : C::kDqSplit; };
  auto dq_cols_added = [](int g) { return C::kDqRowSplit ? D : g == 0 ? C::kDqSplit : C::kDqN; };

  if (threadIdx.x == 0) {
    mbar_init(kv_full, 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&q_full[s], 1 + 32);
      mbar_init(&q_empty[s], 128 * C::kConsumers);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (warpgroup == 0) {
    // ---------------------------------------------------------------- producer
    regs_release<C::kProducerRegs>();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (threadIdx.x == 0) {
      tma_prefetch_map(&maps.q);
      tma_prefetch_map(&maps.k);
      tma_prefetch_map(&maps.v);
      tma_prefetch_map(&maps.dout);
      mbar_arrive_expect_tx(kv_full, 2 * C::kKVBytes);
      for (int c = 0; c < kChunks; ++c) {
        tma_load_4d(sK + c * kBlockN * kSwB, &maps.k, kv_full, c * kSwE, k_row + n0, hk, tma_b);
        tma_load_4d(sV + c * kBlockN * kSwB, &maps.v, kv_full, c * kSwE, k_row + n0, hk, tma_b);
      }
      Walk w = walk0;
      for (int it = 0; it < iters; ++it, step_walk(w)) {
        const int s = it % kStages, h = w.h, row = q_row + w.m * kBlockM;
        mbar_wait(&q_empty[s], ((it / kStages) & 1) ^ 1);
        mbar_arrive_expect_tx(&q_full[s], 2 * C::kQBytes);
        for (int c = 0; c < kChunks; ++c) {
          tma_load_4d(sQ + s * C::kQBytes + c * kBlockM * kSwB, &maps.q, &q_full[s], c * kSwE, row, h, tma_b);
          tma_load_4d(sdO + s * C::kQBytes + c * kBlockM * kSwB, &maps.dout, &q_full[s], c * kSwE, row, h, tma_b);
        }
      }
    } else if (warp == 1) {
      // L (natural log, from the forward) goes into the exp2 domain here; rows past the end get L = +inf
      // and D = 0, so their P and dS are exactly 0 without a row mask. The next tile's rows are loaded
      // as soon as this one is stored, so the global latency hides under the wait for the next slot.
      constexpr int kRowsPerLane = kBlockM / 32;
      float l_next[kRowsPerLane], d_next[kRowsPerLane];
      auto fetch = [&](const Walk& w) {
        const int64_t stat0 = seq.stat_row0(w.h);
#pragma unroll
        for (int r = 0; r < kRowsPerLane; ++r) {
          const int row = w.m * kBlockM + lane + 32 * r;
          l_next[r] = row < seq.len_q ? __ldg(p.lse + stat0 + row) * static_cast<float>(M_LOG2E) : INFINITY;
          d_next[r] = row < seq.len_q ? __ldg(p.dsum + stat0 + row) : 0.f;
        }
      };
      Walk w = walk0;
      if (iters > 0) fetch(w);
      for (int it = 0; it < iters; ++it) {
        const int s = it % kStages;
        mbar_wait(&q_empty[s], ((it / kStages) & 1) ^ 1);
#pragma unroll
        for (int r = 0; r < kRowsPerLane; ++r) {
          sL[s * kBlockM + lane + 32 * r] = l_next[r];
          sDsum[s * kBlockM + lane + 32 * r] = d_next[r];
        }
        mbar_arrive(&q_full[s]);
        step_walk(w);
        if (it + 1 < iters) fetch(w);
      }
    } else if (warp == 2) {
      // Note [dQ by TMA reduce]: the writer. Each group's staging starts free; after each tile's reduces
      // have read it, it is free again (not after the last tile: nobody waits for that).
      if (lane == 0) tma_prefetch_map(&maps.dq_accum);
      static_assert(C::kConsumers == 2, "the writer's wait_group counts assume two groups");
      // (A block no query sees runs no tile: its consumers never wait, so nothing is handed over.)
      if (iters > 0)
        for (int g = 0; g < C::kConsumers; ++g) named_arrive(kBarDqEmpty + g, kDqBarThreads);
      // Note [deterministic dQ]. With p.dq_semaphore, every query tile has a counter of the key blocks that
      // have added into it; block n waits until it reads n (acquire), adds, waits until its adds are done
      // and bumps the counter (release). Every tile's partial sums then land in key-block order, whatever
      // order the blocks run in. Blocks of a head start in key-block order (Note [bwd grid order]) and
      // block n - 1 is always ahead of block n, so the waits end; the cost is that block n trails n - 1.
      // Under a mask the key blocks that reach a query tile are a run n_lo .. n_hi (n_lo: the block of the first
      // key a row of the tile sees), so block n waits for n - n_lo.
      const int64_t tiles64 = (p.seqlen_q + 63) / 64;
      // Note [dQ first store]. dq_accum is not zeroed when the caller gives p.dq_tile_ticket (or asks for the
      // deterministic order): per query tile, the block that takes ticket 0 stores its partial dQ (TMA store,
      // not reduce), waits until the store has landed and raises the tile's flag (release); every other block
      // waits for the flag (acquire) before its first add. No wait can block for long: ticket 0 is taken by a
      // running block whose store depends on nothing. In the deterministic order key block 0 is first in
      // every tile, so it stores. Saves the preprocess's pass of zeros over dq_accum (4 bytes per element).
      // A packed sequence's last partial tile adds instead, into rows the preprocess zeroed: its boxes reach into
      // the next sequence's rows, where a store would overwrite what that sequence's blocks added (its adds there
      // are zeros: those rows see none of its keys).
      Walk w = walk0;
      for (int it = 0; it < iters; ++it, step_walk(w)) {
        const int h = w.h, m = w.m;
        const int64_t tile_index = (static_cast<int64_t>(b) * p.heads + h) * tiles64 + m * (kBlockM / 64);
        const bool storable = !flash_varlen(p) || (m + 1) * kBlockM <= seq.len_q;
        int* turn = p.dq_semaphore ? p.dq_semaphore + tile_index : nullptr;
        // The tile's ticket: [0] taken, [1] stored.
        int* ticket = !turn && storable && p.dq_tile_ticket ? p.dq_tile_ticket + tile_index * 2 : nullptr;
        bool store = false;  // lane 0's: this block's partial dQ of tile m is the first
        if (turn && lane == 0) {
          const int n_lo = Masked ? seq.key_begin(m * kBlockM) / kBlockN : 0;
          while (ld_acquire_gpu(turn) != n_block - n_lo) {
          }
          fence_proxy_async_global();  // the adds below (async proxy) after the acquire
          store = n_block == n_lo && storable;
        } else if (ticket && lane == 0) {
          store = atomicAdd(ticket, 1) == 0;
          if (!store) {
            while (ld_acquire_gpu(ticket + 1) == 0) {
            }
            fence_proxy_async_global();
          }
        }
        // Both groups' reduces are issued before either staging is waited for, so group 1's never queues
        // behind group 0's read.
        for (int g = 0; g < C::kConsumers; ++g) {
          named_sync(kBarDqFull + g, kDqBarThreads);
          if (lane == 0) {
            const unsigned char* stage = smem + C::kOffDQ + g * C::kDqStageBytes;
            const int chunks = (dq_cols_added(g) + C::kDqChunkCols - 1) / C::kDqChunkCols;
            for (int c = 0; c < chunks; ++c) {
              const int col = dq_col0(g) + c * C::kDqChunkCols, row = q_row + m * kBlockM + dq_row0(g);
              const int plane = seq.plane_base + h;
              if (store)
                tma_store_3d(stage + c * C::kDqChunkBytes, &maps.dq_accum, col, row, plane);
              else
                tma_reduce_add_3d(stage + c * C::kDqChunkBytes, &maps.dq_accum, col, row, plane);
            }
            bulk_commit();
          }
        }
        if (turn && lane == 0) {
          bulk_wait_all();             // the adds are done, not only their reads of shared memory
          fence_proxy_async_global();  // ... and ordered before the release below
          red_release_add_gpu(turn, 1);
        } else if (ticket && store && lane == 0) {
          bulk_wait_all();  // the store has landed: the other blocks may add
          fence_proxy_async_global();
          st_release_gpu(ticket + 1, 1);
        }
        for (int g = 0; g < C::kConsumers; ++g) {
          if (lane == 0) g == 0 ? bulk_wait_read<1>() : bulk_wait_read<0>();
          __syncwarp();
          if (it + 1 < iters) named_arrive(kBarDqEmpty + g, kDqBarThreads);
        }
      }
      if (lane == 0) bulk_wait_all();
    }
    return;
  }

  // ------------------------------------------------------------------ consumers
  regs_claim<C::kConsumerRegs>();
  const int wg = warpgroup - 1;
  const int t = threadIdx.x % 128;
  const int warp = t / 32, lane = t % 32;
  const int key0 = n0 + wg * C::kKeysPerGroup;  // this group's first key
  // This thread's rows (keys) of the S^T / dP^T / dK / dV fragments, local to the group, and columns.
  const int key_local_a = warp * 16 + lane / 4;
  const int key_a = key0 + key_local_a, key_b = key_a + 8;
  const int col_in_tile = 2 * (lane % 4);

  const uint32_t k_group = smem_addr(sK) + wg * C::kKeysPerGroup * kSwB;  // rows of this group in K / V
  const uint32_t v_group = smem_addr(sV) + wg * C::kKeysPerGroup * kSwB;

  const float scale_log2 = p.scale * static_cast<float>(M_LOG2E);
  float acc_dk[D / 2], acc_dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) acc_dk[i] = acc_dv[i] = 0.f;
  uint32_t p_frag[kBlockM / 16][4], ds_frag[kBlockM / 16][4];

  // S^T = K Q^T or dP^T = V dO^T (issue only): A = this group's 64 rows of K (V), B = the Q (dO) slot,
  // both K-major over the head dim.
  // Descriptors are built from their two words (desc_lo / desc_at, hopper_ptx.cuh): one add per k-step.
  constexpr uint32_t kHiAtom = desc_hi<kSwB>(kAtomBytes), kHiDs = desc_hi<128>(1024);
  auto issue_kq = [&](float(&acc)[kBlockM / 2], uint32_t a_base, uint32_t b_slot) {
    const uint32_t a_lo = desc_lo(a_base, 16), b_lo = desc_lo(b_slot, 16);
#pragma unroll
    for (int kk = 0; kk < C::kKSteps; ++kk) {
      const int c = kk / (kSwE / 16), off = (kk % (kSwE / 16)) * 32;
      const uint64_t da = desc_at(a_lo, kHiAtom, c * kBlockN * kSwB + off);
      const uint64_t db = desc_at(b_lo, kHiAtom, c * kBlockM * kSwB + off);
      wgmma_ss<T, kBlockM>(acc, da, db, kk > 0);
    }
  };
  // Note [K in registers]. S^T = K Q^T as issue_kq, but its first kKRegSteps k-steps take A from this thread's
  // fragments of K (k_frag, loaded once per block below): 2 KB fewer shared-memory bytes per group, tile and
  // k-step held.
  uint32_t k_frag[C::kKInRegs ? C::kKRegSteps : 1][4];
  auto issue_kq_regs = [&](float(&acc)[kBlockM / 2], uint32_t b_slot) {
    const uint32_t a_lo = desc_lo(k_group, 16), b_lo = desc_lo(b_slot, 16);
#pragma unroll
    for (int kk = 0; kk < C::kKSteps; ++kk) {
      const int c = kk / (kSwE / 16), off = (kk % (kSwE / 16)) * 32;
      const uint64_t db = desc_at(b_lo, kHiAtom, c * kBlockM * kSwB + off);
      if (kk < C::kKRegSteps)
        wgmma_rs_bk<T, kBlockM>(acc, k_frag[kk < C::kKRegSteps ? kk : 0], db, kk > 0);
      else
        wgmma_ss<T, kBlockM>(acc, desc_at(a_lo, kHiAtom, c * kBlockN * kSwB + off), db, kk > 0);
    }
  };
  // acc (64 keys x D) += frag (P^T or dS^T in registers, 64 keys x kBlockM queries) * slot (kBlockM
  // queries x D: dO or Q, N-major).
  auto issue_acc_rs = [&](float(&acc)[D / 2], const uint32_t(&frag)[kBlockM / 16][4], uint32_t slot) {
    const uint32_t b_lo = desc_lo(slot, kBlockM * kSwB);
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk) {
      const uint64_t db = desc_at(b_lo, kHiAtom, kk * 16 * kSwB);
      wgmma_rs<T, D>(acc, frag[kk], db, 1);
    }
  };
  // dQ columns [col0, col0 + kDqN) of this group's 64 query rows = dS (those rows x 128 keys: both groups'
  // tiles in buffer `buf`, K-major, 128-byte swizzle) * K (128 keys x kDqN, N-major).
  auto issue_dq = [&](float(&acc)[C::kDqN / 2], int buf) {
    constexpr int N = C::kDqN;
    // Row split: this group's 64 query rows of both dS tiles (128-byte rows, 8-row atoms stay aligned).
    const uint32_t ds_buf = smem_addr(smem + C::kOffDS + buf * C::kConsumers * C::kDSBytes) + dq_row0(wg) * 128;
    const uint32_t k_cols = smem_addr(sK) + (dq_col0(wg) / kSwE) * kBlockN * kSwB;
    const uint32_t a_lo = desc_lo(ds_buf, 16), b_lo = desc_lo(k_cols, kBlockN * kSwB);
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const int g = kk / (C::kKeysPerGroup / 16), off = (kk % (C::kKeysPerGroup / 16)) * 32;
      const uint64_t da = desc_at(a_lo, kHiDs, g * C::kDSBytes + off);
      const uint64_t db = desc_at(b_lo, kHiAtom, kk * 16 * kSwB);
      wgmma_ss_bt<T, N>(acc, da, db, kk > 0);
    }
  };
  // dS^T fragments -> ds_tile[query][key] (128-byte rows, 128-byte swizzle: 16-byte unit u of row r at
  // u ^ (r % 8)), the K-major A operand of dQ = dS K. ds_frag[j] holds the 8 x 8 tiles (query block 2j,
  // keys +0 / +8) and (2j + 1, +0 / +8); stmatrix's transposing store writes each tile's 8 query rows of 8
  // keys (16 bytes), lane 8 m + r naming row r of tile m.
  auto store_ds = [&](unsigned char* ds_tile) {
    const int m = lane / 8, r = lane % 8;
    const int unit = (2 * warp + (m % 2)) ^ r;  // key unit (warp * 16 + 8 (m % 2)) / 8, swizzled by row r % 8
    const uint32_t base = smem_addr(ds_tile) + unit * 16;
#pragma unroll
    for (int j = 0; j < kBlockM / 16; ++j) {
      const int q = 8 * (2 * j + m / 2) + r;
      stmatrix_x4_trans(base + q * 128, ds_frag[j][0], ds_frag[j][1], ds_frag[j][2], ds_frag[j][3]);
    }
  };
  // This group's dQ tile into its staging (Note [dQ by TMA reduce]): 32-column chunks of 128-byte rows with the
  // 128-byte swizzle; columns past what the group adds are dropped.
  // Note [dQ pairs split]. Written by stmatrix with each fp32 value as one 4-byte element (8 stmatrix.x4 per thread
  // and tile at d = 64 and 128, half the instructions of float2 stores for the same bytes; backward v5.4 in
  // docs/flash_notes.md: the sustained backward -1.9 to -3.8 %). Tile j = 2 hr + e of an x4 holds rows +8 hr and pair
  // element e (the fragment's acc[4 i + 2 hr + e]); lane 4 r + c's value, column 8 i + 2 c + e, lands at float 4 e + c
  // of its 8-column group, in the 16-byte unit (8 i % 32) / 4 + e of the row, swizzled by the row. So every 8-column
  // group of the staging, and of dq_accum, holds columns 0 2 4 6 1 3 5 7; the conversion puts them back
  // (run_bwd_steps).
  auto stage_dq = [&](const float(&acc)[C::kDqN / 2]) {
    unsigned char* stage = smem + C::kOffDQ + wg * C::kDqStageBytes;
    const int n_add = dq_cols_added(wg);
    const int j = lane / 8, r = lane % 8;  // this lane gives the address of row r of tile j
    const uint32_t row_base = smem_addr(stage) + (warp * 16 + 8 * (j / 2) + r) * 128;
#pragma unroll
    for (int i = 0; i < C::kDqN / 8; ++i) {
      if (8 * i >= n_add) continue;
      const int chunk = (8 * i) / C::kDqChunkCols, unit = ((8 * i) % C::kDqChunkCols) / 4 + j % 2;
      stmatrix_x4(row_base + chunk * C::kDqChunkBytes + ((unit ^ r) * 16), __float_as_uint(acc[4 * i]),
                  __float_as_uint(acc[4 * i + 1]), __float_as_uint(acc[4 * i + 2]), __float_as_uint(acc[4 * i + 3]));
    }
  };

  // Note [K in registers]. At d = 128 the consumers read ~256 KB of wgmma operands from shared memory per
  // 64-query tile (S^T, dP^T and dQ SS, dV and dK RS), and the sustained backward runs under the power cap
  // (docs/flash_notes.md), so fewer shared-memory bytes per FLOP should mean higher clocks. K's 64 rows of a
  // group are the same for every tile of the block: held as wgmma A fragments they take 2 KB per group, tile
  // and k-step off S^T's reads (all 8 k-steps: 32 of the ~370 KB read and written per tile). Registers bound
  // it: beside dK, dV (64 each), S^T, dP^T (32 each) and 240 per thread, 5 k-steps (20 registers) fit once
  // dV is retired before dQ is issued (below); with 6 or more ptxas serialises the wgmmas. V (dP^T) would
  // need as many registers again.
  // Note [bwd issue order]. Per tile, the tensor core always has queued work while the CUDA cores do the
  // elementwise steps: S^T and dP^T are issued together and P^T = exp2(..) runs under dP^T; dV += P^T dO
  // is issued as soon as P^T is packed and runs under the dS store and the groups' barrier; dQ and dK
  // are issued back to back, and the dQ staging (and the slot's release) runs under dK.
  // Note [dS buffers]. dQ needs both groups' dS, so the groups meet at kBarDs after writing it; tiles
  // alternate between two dS buffers, so a group may write the next tile's dS while the other still
  // reads this one, and the barrier of that next tile guarantees the older buffer is no longer read.
  // A group whose keys all lie after the tile's queries (causal) or past the end runs the tile anyway,
  // fully masked (P = dS = 0): ptxas serialises wgmmas on paths it cannot prove uniform. Note [blind group tiles]:
  // with kSkipBlind such a group writes a zero dS and runs only its share of dQ, in an issue group of its own.
  mbar_wait(kv_full, 0);
  if constexpr (C::kKInRegs) {
    // Note [K in registers]. k_frag[kk] = the m64k16 A fragment of K's rows [16 warp, 16 warp + 16) of this
    // group, columns [16 kk, 16 kk + 16): ldmatrix tile j = lane / 8 is rows +8 (j % 2), columns +8 (j / 2);
    // lane r of it names row 16 warp + 8 (j % 2) + r, whose 16-byte unit u sits at u ^ (row % 8) (128-byte
    // swizzle; the group's rows start on an 8-row atom, so row % 8 = r).
    const int j = lane / 8, r = lane % 8;
    const uint32_t row_addr = k_group + (warp * 16 + 8 * (j % 2) + r) * kSwB;
#pragma unroll
    for (int kk = 0; kk < C::kKRegSteps; ++kk) {
      const int c = kk / (kSwE / 16), unit = (kk % (kSwE / 16)) * 2 + j / 2;
      ldmatrix_x4(row_addr + c * kBlockN * kSwB + ((unit ^ r) * 16), k_frag[kk]);
    }
  }
  // This group's dQ of the last tile issued, handed to the writer (Note [dQ by TMA reduce]): wait until the writer
  // has freed the staging, stage, make the stores visible to TMA, tell the writer.
  float acc_dq[C::kDqN / 2];
  auto hand_over_dq = [&] {
    named_sync(kBarDqEmpty + wg, kDqBarThreads);
    stage_dq(acc_dq);
    fence_proxy_async_smem();  // the staging stores before the TMA reduce (async proxy) reads them
    named_arrive(kBarDqFull + wg, kDqBarThreads);
  };
  // Per block, so the sequence's fields need no registers in the loop: the query tiles walked ([m_begin, m_end), once
  // per query head), the tiles the mask leaves whole (every query sees all the group's keys; none at the key
  // tail), and the queries that see this thread's keys, [q_lo, q_hi] (none past the end).
  const int m_begin = m_first * kBlockM, m_end = (m_first + m_count) * kBlockM;
  const int2 whole = seq.whole_query_tiles<Masked>(key0, C::kKeysPerGroup, kBlockM);
  const int q_lo_a = seq.first_query<Masked>(key_a), q_hi_a = seq.last_query<Masked>(key_a);
  const int q_lo_b = seq.first_query<Masked>(key_b), q_hi_b = seq.last_query<Masked>(key_b);
  // Note [blind group tiles]. Under a mask, the query tiles of a key block that some key of the block is seen by can
  // hold one that none of a group's 64 keys is seen by: at d = 80 / 128 (64-query tiles over 128 keys) the causal
  // diagonal's first tile, rows [n0, n0 + 64), for the group of keys [n0 + 64, n0 + 128); a group past the key tail.
  // Its P and dS are exactly 0, so its S^T, dP^T, dV and dK GEMMs add nothing; it still writes its (zero) dS for
  // the other group's dQ and runs its own columns of dQ, which the other group's keys feed. Four of its five GEMMs
  // of the tile: at 16 x 1024 causal, 8 of the 144 group tiles of a head's key blocks. Each path is a whole issue
  // group (fence to wait), the branch broadcast from lane 0, so ptxas sees it warp-uniform.
  auto blind_tile = [&](int m0) {
    // (first_query is INT_MAX for a key past the end.)
    const int last_key = min(key0 + C::kKeysPerGroup, seq.len_k) - 1;
    const bool blind = seq.first_query<Masked>(key0) >= m0 + kBlockM || seq.last_query<Masked>(last_key) < m0;
    return __shfl_sync(0xffffffffu, blind, 0) != 0;
  };
  int m0 = m_begin;
#pragma unroll 1
  for (int it = 0; it < iters; ++it, m0 = m0 + kBlockM == m_end ? m_begin : m0 + kBlockM) {
    const int s = it % kStages, buf = it & 1;
    const uint32_t q_slot = smem_addr(sQ + s * C::kQBytes), do_slot = smem_addr(sdO + s * C::kQBytes);
    const float* l_s = sL + s * kBlockM;
    const float* dsum_s = sDsum + s * kBlockM;
    float s_acc[kBlockM / 2], dp_acc[kBlockM / 2];
    mbar_wait(&q_full[s], (it / kStages) & 1);
    if constexpr (C::kSkipBlind && Masked) {
      if (blind_tile(m0)) {
#pragma unroll
        for (int j = 0; j < kBlockM / 16; ++j) ds_frag[j][0] = ds_frag[j][1] = ds_frag[j][2] = ds_frag[j][3] = 0u;
        store_ds(smem + C::kOffDS + (buf * C::kConsumers + wg) * C::kDSBytes);
        fence_proxy_async_smem();
        named_sync(kBarDs, 128 * C::kConsumers);
        wgmma_fence();
        issue_dq(acc_dq, buf);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(acc_dq);
        hand_over_dq();
        mbar_arrive(&q_empty[s]);
        continue;
      }
    }
    wgmma_fence();
    if constexpr (C::kKInRegs)
      issue_kq_regs(s_acc, q_slot);
    else
      issue_kq(s_acc, k_group, q_slot);
    wgmma_commit();
    issue_kq(dp_acc, v_group, do_slot);
    wgmma_commit();

    wgmma_wait<1>();
    fence_regs(s_acc);
    // P^T = exp2(S^T scale log2e - L log2e); only tiles across a bound of the mask and the key tail are masked. Two
    // copies of the loop behind a branch on `masked` (uniform over the group): with one loop and the mask
    // inside it, ptxas predicated the mask's compares and selects, which then took issue slots on every tile
    // (~190 of ~1,000 instructions per consumer warp and tile at d = 64: docs/flash_notes.md, v5.2).
    const bool masked = m0 < whole.x || m0 > whole.y;
    auto softmax = [&](auto mask) {
#pragma unroll
      for (int i = 0; i < kBlockM / 8; ++i) {
        const float2 l = *reinterpret_cast<const float2*>(l_s + 8 * i + col_in_tile);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float le = e ? l.y : l.x;
          float pa = fast_exp2(fmaf(s_acc[4 * i + e], scale_log2, -le));
          float pb = fast_exp2(fmaf(s_acc[4 * i + 2 + e], scale_log2, -le));
          if constexpr (decltype(mask)::value) {
            const int q = m0 + 8 * i + col_in_tile + e;
            if (q < q_lo_a || q > q_hi_a) pa = 0.f;
            if (q < q_lo_b || q > q_hi_b) pb = 0.f;
          }
          s_acc[4 * i + e] = pa;
          s_acc[4 * i + 2 + e] = pb;
        }
      }
    };
    if (masked)
      softmax(std::true_type{});
    else
      softmax(std::false_type{});
    wgmma_wait<0>();
    fence_regs(dp_acc);
    // dS^T = P^T ∘ (dP^T - D); P^T and dS^T into the A-fragment order (convert_p in the forward), one
    // 8-column block at a time, so each block's fp32 values die as soon as they are packed.
#pragma unroll
    for (int i = 0; i < kBlockM / 8; ++i) {
      const float2 dsum = *reinterpret_cast<const float2*>(dsum_s + 8 * i + col_in_tile);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        dp_acc[4 * i + 2 * r] = s_acc[4 * i + 2 * r] * (dp_acc[4 * i + 2 * r] - dsum.x);
        dp_acc[4 * i + 2 * r + 1] = s_acc[4 * i + 2 * r + 1] * (dp_acc[4 * i + 2 * r + 1] - dsum.y);
      }
      p_frag[i / 2][(i % 2) * 2] = pack2<T>(s_acc[4 * i], s_acc[4 * i + 1]);
      p_frag[i / 2][(i % 2) * 2 + 1] = pack2<T>(s_acc[4 * i + 2], s_acc[4 * i + 3]);
      ds_frag[i / 2][(i % 2) * 2] = pack2<T>(dp_acc[4 * i], dp_acc[4 * i + 1]);
      ds_frag[i / 2][(i % 2) * 2 + 1] = pack2<T>(dp_acc[4 * i + 2], dp_acc[4 * i + 3]);
    }
    wgmma_fence();
    issue_acc_rs(acc_dv, p_frag, do_slot);
    wgmma_commit();
    store_ds(smem + C::kOffDS + (buf * C::kConsumers + wg) * C::kDSBytes);
    fence_proxy_async_smem();                 // the stmatrix stores before the wgmma (async proxy) reads them
    named_sync(kBarDs, 128 * C::kConsumers);  // both groups' dS written (Note [dS buffers])
    if constexpr (C::kKInRegs) {
      // Note [K in registers]: dV (issued before the dS store) retired here, so P^T's registers are free before
      // dQ's accumulators are live; otherwise ptxas runs out of registers and serialises the wgmmas.
      wgmma_wait<0>();
      fence_regs(acc_dv);
      fence_regs(p_frag);
    }

    wgmma_fence();
    issue_dq(acc_dq, buf);
    wgmma_commit();
    issue_acc_rs(acc_dk, ds_frag, q_slot);
    wgmma_commit();
    wgmma_wait<1>();  // dV and dQ done; dK may still run
    fence_regs(acc_dq);
    fence_regs(acc_dv);
    fence_regs(p_frag);
    hand_over_dq();
    wgmma_wait<0>();
    fence_regs(acc_dk);
    fence_regs(ds_frag);
    mbar_arrive(&q_empty[s]);  // every wgmma that read the slot has completed
  }

  // Epilogue: dK = scale * dS^T Q, dV = P^T dO, rows of this thread's two keys; with a group split, this block's
  // part of the group's fp32 sums instead (scaled by the conversion).
  T* gdK = static_cast<T*>(p.dk) + b * p.dk_batch_stride + hk * p.dk_head_stride + seq.k_row0 * p.dk_row_stride;
  T* gdV = static_cast<T*>(p.dv) + b * p.dv_batch_stride + hk * p.dv_head_stride + seq.k_row0 * p.dv_row_stride;
  float* sum_k = split > 1 ? p.dkv_accum + seq.kv_row0(hk) * D : nullptr;
  float* sum_v = split > 1 ? sum_k + flash_kv_planes(p) * flash_kv_rows(p) * D : nullptr;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = r ? key_b : key_a;
    if (key >= seq.len_k) continue;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      const int col = 8 * i + col_in_tile;
      const float k0 = acc_dk[4 * i + 2 * r], k1 = acc_dk[4 * i + 2 * r + 1];
      const float v0 = acc_dv[4 * i + 2 * r], v1 = acc_dv[4 * i + 2 * r + 1];
      if (sum_k) {
        const int64_t at = static_cast<int64_t>(key) * D + col;
        atomicAdd(reinterpret_cast<float2*>(sum_k + at), make_float2(k0, k1));
        atomicAdd(reinterpret_cast<float2*>(sum_v + at), make_float2(v0, v1));
      } else {
        *reinterpret_cast<uint32_t*>(gdK + key * p.dk_row_stride + col) = pack2<T>(k0 * p.scale, k1 * p.scale);
        *reinterpret_cast<uint32_t*>(gdV + key * p.dv_row_stride + col) = pack2<T>(v0, v1);
      }
    }
  }
}

}  // namespace lmscale::kernels::hopper
