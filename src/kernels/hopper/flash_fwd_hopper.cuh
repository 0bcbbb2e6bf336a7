// FlashAttention forward for Hopper (sm_90a), docs/spec.md §3: same contract as the mma.sync kernel
// (flash_fwd_kernel.cuh) — O in the input dtype, L = m + log l in fp32 — built on the Hopper machinery:
//
//   * warp specialisation: warpgroup 0 is the producer (one thread issues TMA tile loads, the group gives
//     its registers away with setmaxnreg); warpgroups 1..kConsumers are consumers, each owning 64 query
//     rows of the block and keeping O, m and l in registers (setmaxnreg hands them the rest of the file);
//   * TMA: Q once, then K and V tiles through a kStages-deep ring of shared-memory slots, each slot
//     guarded by a "full" mbarrier (TMA bytes landed) and an "empty" mbarrier (both consumers done);
//   * wgmma: S = Q K^T with both operands in shared memory, O += P V with P straight from registers;
//   * intra-warpgroup overlap: S_{j+1} = Q K_{j+1}^T and O += P_j V_j are both in flight while the
//     exponentials of tile j+1 run, so the tensor cores wait on softmax only for the first tile;
//   * optional ping-pong between two consumer groups (Note [ping-pong]), so one group's softmax also
//     hides under the other group's GEMMs;
//   * persistent blocks (Note [persistent forward]): one block per SM takes query tiles in turn, the K/V
//     ring running on across them, and a tile's last P V goes beside the next tile's first S (Note [tile seam]).
//
// Tiles are stored exactly as TMA writes them with the 128- (or 64-) byte swizzle: a (rows x D) tile is
// kChunks column chunks of kSwizzleElems elements, each chunk rows x kSwizzleBytes, swizzled in 8-row
// atoms. The wgmma descriptors below describe that layout directly (Note [descriptors]).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/flash_params.h"
#include "kernels/flash_sequence.cuh"
#include "kernels/hopper/flash_hopper_tiles.h"
#include "kernels/hopper/hopper_common.cuh"
#include "kernels/hopper/hopper_ptx.cuh"
#include "kernels/hopper/wgmma_ops.cuh"

namespace lmscale::kernels::hopper {

// One forward variant: dtype, head dim, key tile, consumer warpgroups (64 query rows each) and whether
// the consumers take turns issuing their GEMMs (ping-pong, Note [ping-pong]); kQSlots Q tiles in shared memory (1, or
// 2 so the next tile's Q loads while the last one is in use: Note [persistent forward]); whether a group that sees only
// the first half of a query tile's first key tile runs half-width GEMMs there (Note [half edge tile]); whether O goes
// out through shared memory by TMA stores (Note [O by TMA store]). FwdShipped picks per D.
template <typename T_, int D_, int kBlockN_, int kConsumers_, bool kPingPong_, int kQSlots_ = 1,
          bool kHalfEdge_ = false, bool kTmaStoreO_ = false>
struct FwdConfig {
  using T = T_;
  static constexpr int D = D_;
  static constexpr int kConsumers = kConsumers_;
  static constexpr bool kPingPong = kPingPong_ && kConsumers_ == 2;
  static constexpr int kQSlots = kQSlots_;
  static constexpr bool kHalfEdge = kHalfEdge_;
  static constexpr bool kTmaStoreO = kTmaStoreO_;
  static constexpr int kBlockM = 64 * kConsumers;  // one wgmma M (64 rows) per consumer warpgroup
  static constexpr int kBlockN = kBlockN_;
  // Head dims that are a multiple of 64 use the 128-byte swizzle; 80 is padded to 96 and uses 64-byte
  // chunks (TMA zero-fills columns 80..95, so they add nothing to Q K^T). O keeps exactly D columns.
  static constexpr int kSwizzleBytes = D % 64 == 0 ? 128 : 64;
  static constexpr int kSwizzleElems = kSwizzleBytes / 2;
  static constexpr int kDPad = (D + kSwizzleElems - 1) / kSwizzleElems * kSwizzleElems;
  static constexpr int kChunks = kDPad / kSwizzleElems;
  static constexpr int kQBytes = kBlockM * kDPad * 2;
  static constexpr int kKVBytes = kBlockN * kDPad * 2;  // one K (or V) slot
  // O's staging, one 64-row tile per consumer group, laid out as Q's rows (Note [O by TMA store]).
  static constexpr int kOGroupBytes = 64 * kDPad * 2;
  static constexpr int kOBytes = kTmaStoreO ? kConsumers * kOGroupBytes : 0;
  // As many K/V stages as fit next to Q (and O's staging) in 227 KB (at most 4).
  static constexpr int kStages = (227 * 1024 - 2048 - kQSlots * kQBytes - kOBytes) / (2 * kKVBytes) > 4
                                     ? 4
                                     : (227 * 1024 - 2048 - kQSlots * kQBytes - kOBytes) / (2 * kKVBytes);
  static constexpr int kThreads = 128 * (kConsumers + 1);
  // Register split (setmaxnreg): the producer keeps 24, the consumers share the rest of the 64K file (240 each of
  // two, 160 each of three). ptxas spills a few words of the producer's tile walk (the tile counter, a packed batch's
  // slot search, the hand-on through shared memory) to local memory at 24: one thread that mostly waits on barriers.
  // Giving it 56 (no spill) left the consumers 224 / 152 and cost the 16k x 128 and 2048 x 80 forwards 4-10 %.
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = ((65536 - 128 * kProducerRegs) / (128 * kConsumers)) / 8 * 8 > 240
                                           ? 240
                                           : ((65536 - 128 * kProducerRegs) / (128 * kConsumers)) / 8 * 8;
  // Shared memory: Q, K slots, V slots (1024-byte aligned: the swizzle pattern repeats every 1024 bytes
  // and the descriptors assume atom-aligned bases), then the barriers.
  static constexpr int kOOffset = kQSlots * kQBytes + 2 * kStages * kKVBytes;
  static constexpr int kBarrierOffset = kOOffset + kOBytes;
  static constexpr int kTileOffset = kBarrierOffset + (2 * kQSlots + 4 * kStages) * 8;  // the tiles handed on
  static constexpr int kSmemBytes = kTileOffset + 16 + 1024;                            // + alignment slack
  static_assert(kQSlots == 1 || kQSlots == 2, "one Q slot, or two (the 16 bytes at kTileOffset hold one index each)");
  static_assert(kStages >= 2, "K/V need double buffering (with O's staging too)");
  static_assert(!(kHalfEdge && kTmaStoreO), "with both, ptxas serialises every wgmma of the kernel (C7511)");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one block");
  static_assert(D % 16 == 0 && D <= 256, "wgmma N is a multiple of 8; P V uses N = D");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "S = Q K^T uses wgmma N = kBlockN");
  static_assert(!kHalfEdge || (kBlockN / 2) % 16 == 0, "a half edge tile is whole 16-key steps of P V");
  static_assert(!kHalfEdge || kConsumers == 2, "with three groups ptxas serialises every wgmma of the half edge kernel "
                                               "(C7511, insufficient registers: Note [half edge tile])");
};

// The shipped variant per head dim: the choices of flash_hopper_tiles.h (measured there, checked there).
template <typename T, int D>
using FwdShipped = FwdConfig<T, D, fwd_block_n(D), fwd_consumers(D), fwd_ping_pong(D), fwd_q_slots(D)>;
// The variant of short causal calls where the head dim has one (fwd_takes_short_tile, flash_hopper_tiles.h).
template <typename T, int D>
using FwdShort = FwdConfig<T, D, fwd_short_block_n(D), fwd_short_consumers(D), true, fwd_q_slots(D)>;

struct FwdMaps {
  CUtensorMap q, k, v;
};
// ... and O's, a box of one group's 64 rows, where O goes out by TMA stores (Note [O by TMA store]).
struct FwdMapsO : FwdMaps {
  CUtensorMap o;
};
template <typename C>
using FwdMapsFor = std::conditional_t<C::kTmaStoreO, FwdMapsO, FwdMaps>;

// Note [descriptors]. K-major operands (Q as A, K as B of S = Q K^T): each 16-wide k step of the
// contraction lies inside one swizzle row, so the descriptor starts at chunk + 32 bytes * step, the 8-row
// atoms are kSwizzleBytes * 8 apart (stride byte offset) and the leading offset is unused. V as the B
// operand of O = P V is N-major (D contiguous): one atom is 8 keys x kSwizzleElems columns; the next 8
// keys are one atom further (stride byte offset), the next column chunk a whole chunk further (leading
// byte offset), and a 16-key step advances 16 rows.

// Note [persistent forward]. One block per SM (launch_fwd) takes the query tiles of fwd_tile's order: heaviest causal
// tiles first, every (batch, head) of one query tile next to each other (the order the hardware gave a grid of one
// block per tile, Note [grid order] in flash_fwd_kernel.cuh), packed batches over the tiles they have (Note [packed
// tile slots]). With FlashParams::fwd_tile_counter each block's producer takes the next tile by one atomic add as its
// ring frees up, and hands the index to the consumers through shared memory (q_full); without one, step k of block
// i takes tile k G + i for even k and k G + G - 1 - i for odd k (G blocks). Fixed shares leave the SMs unevenly
// loaded as the tiles get lighter along the order: taking every G-th ran the 16k x 64 / 128 causal forwards 6 / 10 %
// slower than a grid of one block per tile, the snake packed documents 5-12 % slower (the counter: 8 % faster).
// The K/V ring and its barriers run on across tiles and Q has an "empty" barrier of its own; with a block per tile,
// every tile paid its block's start, its loads' latency and its pipeline's fill and drain (at 4 x 25 x 512 x 64,
// 400 tiles of 1-3 key tiles; packed documents of ~1k tokens, ~4). With one Q slot the next
// tile's Q loads once the last S of the tile before is done, and its K/V wait behind it; with kQSlots = 2 (the shipped
// choice, fwd_q_slots) it loads into the other slot while this tile runs (the producer then takes its next tile one
// tile earlier).
// The tile a block's producer takes at its step-th turn; past the last: >= tile_count.
__device__ __forceinline__ int fwd_next_tile(const FlashParams& p, int step, int tile_count) {
  if (p.fwd_tile_counter) return atomicAdd(p.fwd_tile_counter, 1);
  if (static_cast<int64_t>(step) * gridDim.x >= tile_count) return tile_count;
  const int lane = step & 1 ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
  return step * static_cast<int>(gridDim.x) + lane;
}

struct FwdTile {
  int b, h, m_block;
};

template <int kBlockM>
__host__ __device__ __forceinline__ int64_t fwd_tile_count(const FlashParams& p) {
  return p.heads * flash_row_tiles(p, p.total_q, p.seqlen_q, kBlockM);
}

// Tile t of fwd_tile_count: false for a packed batch's slot that holds no tile.
template <int kBlockM>
__device__ __forceinline__ bool fwd_tile(const FlashParams& p, int t, FwdTile& tile) {
  if (!flash_varlen(p)) {
    const int bh_count = p.batch * p.heads, m_blocks = (p.seqlen_q + kBlockM - 1) / kBlockM;
    const int mi = t / bh_count, bh = t - mi * bh_count;
    tile = FwdTile{bh / p.heads, bh % p.heads, m_blocks - 1 - mi};
    return true;
  }
  const int slot = t / p.heads;
  tile.h = t - slot * p.heads;
  int index = 0;
  if (!flash_packed_tile(p.cu_seqlens_q, p.batch, kBlockM, slot, tile.b, index)) return false;
  const int len = p.cu_seqlens_q[tile.b + 1] - p.cu_seqlens_q[tile.b];
  tile.m_block = (len + kBlockM - 1) / kBlockM - 1 - index;  // a sequence's heaviest causal tile first
  return true;
}

// Note [top-aligned tiles]. Where a query tile is not a whole number of key tiles (d = 64's 192 rows over 128 keys), a
// causal call's query tiles end at its last row rather than start at its first, so the partial tile is the lightest
// (rows from m0 < 0, one key tile) instead of the heaviest (every key): of the visited area, 5.5 % less at 4096 keys,
// 1.5 % at 8k and 16k. Rows before the sequence are loaded (zeros, or a packed neighbour's rows), see no key and are
// never written. Where key tiles divide the query tile (128 over 128, 192 over 96) the shift would only cut one more
// key tile per diagonal, so those start at the first row.
template <int kBlockM, int kBlockN>
__device__ __forceinline__ int fwd_tile_row0(const FlashParams& p, const FlashSeq& seq, int m_block) {
  const int pad = kBlockM % kBlockN != 0 && p.is_causal ? (kBlockM - seq.len_q % kBlockM) % kBlockM : 0;
  return m_block * kBlockM - pad;
}

// The key tiles [n_first, n_first + n_tiles * kBlockN) query tile m0 of `seq` visits (Note [mask tiles],
// flash_fwd_kernel.cuh); the producer and the consumers work it out alike.
struct FwdKeyRange {
  int n_first, n_tiles;
};
template <bool Masked, int kBlockM, int kBlockN>
__device__ __forceinline__ FwdKeyRange fwd_key_range(const FlashSeq& seq, int m0) {
  const int n_first = Masked ? seq.key_begin(m0) / kBlockN * kBlockN : 0;
  const int n_end = Masked ? seq.key_end(min(m0 + kBlockM, seq.len_q)) : seq.len_k;
  return {n_first, n_end > n_first ? (n_end - n_first + kBlockN - 1) / kBlockN : 0};
}

// Note [O by TMA store]. With kTmaStoreO each consumer group writes its 64 rows of O / l into a staging tile laid out
// as TMA writes Q (kSwizzleElems-column chunks of 64 rows, swizzled), then one thread stores the chunks by TMA and the
// epilogue goes on: instead of D / 4 four-byte global stores per thread (half of whose sectors are partial), D / 4
// conflict-free shared-memory stores, two group barriers and a fence. The group's thread that issued the last store
// waits for it to have read the staging before the group refills it (a tile later), and for every store before the
// block exits. A packed batch's group whose rows reach before or past its sequence stores from registers: the map's
// rows there are the neighbours'. Named barriers kBarOStage + group (ping-pong takes 1 and 2).
constexpr int kBarOStage = 3;

// Note [half edge tile]. A query tile's key tiles are walked from the last, so the first one S sees is the diagonal
// (causal) or the key tail. Where, under a mask, no row of a consumer group sees that tile's second half (the last key
// its last row sees lies before it: one group of every causal diagonal with 128-row tiles over 128 keys, every key tail
// of at most half a tile), the group runs that tile's S = Q K^T as one wgmma of N = kBlockN / 2 and its P V over the
// first kBlockN / 32 16-key steps, a quarter of the tile's work for the two groups; the other half of S is set to -inf
// (P = 0: the P V steps left out would have added exact zeros). With 128 x 128 tiles, 16 packed documents of 64-2560
// tokens (attention_layouts_bench's) visit 1.11x the area they see, 16 x 1024 1.12x, 4 x 512 1.25x, a 16k sequence
// 1.01x; with the half tiles ~1.07x, 1.07x, 1.15x (tools/probes/hopper_fwd/visited_area.py). ptxas serialises every
// wgmma of the kernel when a branch inside one issue group picks the width (C7520) or two widths' accumulators meet at
// a join while in flight (C7511, C7515), so each width has its own whole issue group: the tile seam's S (this tile's
// first) and the first step of the key-tile loop (its P V) are written twice, and the half seam waits for its S before
// the epilogue rather than under it. The first tile of a block (no seam) and a query tile of one key tile (its P V at
// the next seam) keep full-width GEMMs. Two consumer groups only: with three, ptxas serialises the wgmmas anyway
// (C7511).
template <typename C, bool Masked>
__global__ void __launch_bounds__(C::kThreads, 1) flash_fwd_hopper_kernel(const __grid_constant__ FwdMapsFor<C> maps,
                                                                          const FlashParams p) {
  LMSCALE_HOPPER_KERNEL_PREAMBLE(C);
  unsigned char* sQ = smem;
  unsigned char* sK = sQ + C::kQSlots * C::kQBytes;
  unsigned char* sV = sK + kStages * C::kKVBytes;
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + C::kBarrierOffset);
  uint64_t* q_full = bar;  // one per Q slot, then the Q slots' "empty" barriers
  uint64_t* q_empty = bar + C::kQSlots;
  uint64_t* k_full = bar + 2 * C::kQSlots;
  uint64_t* k_empty = k_full + kStages;
  uint64_t* v_full = k_empty + kStages;
  uint64_t* v_empty = v_full + kStages;
  volatile int* s_tile = reinterpret_cast<volatile int*>(smem + C::kTileOffset);

  const int tile_count = static_cast<int>(fwd_tile_count<kBlockM>(p));  // < 2^31: launch_fwd checks
  // Broadcast from lane 0 so the compiler knows it is warp-uniform (descriptor bases stay in uniform registers).
  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);

  if (threadIdx.x == 0) {
    for (int q = 0; q < C::kQSlots; ++q) {
      mbar_init(&q_full[q], 1);
      // One arrival per consumer thread: each thread's read of the handed-on tile index is its own (racecheck does
      // not see a warp barrier order other lanes' reads before lane 0's arrival).
      mbar_init(&q_empty[q], 128 * C::kConsumers);
    }
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&k_full[s], 1);
      mbar_init(&v_full[s], 1);
      mbar_init(&k_empty[s], 4 * C::kConsumers);  // one arrival per consumer warp
      mbar_init(&v_empty[s], 4 * C::kConsumers);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (warpgroup == 0) {
    // ---------------------------------------------------------------- producer
    regs_release<C::kProducerRegs>();
    if (threadIdx.x == 0) {
      tma_prefetch_map(&maps.q);
      tma_prefetch_map(&maps.k);
      tma_prefetch_map(&maps.v);
      int handed = 0;  // tiles handed to the consumers (q_full's phase): every tile this block takes, and the end
      int ring = 0;    // K/V tiles loaded so far: the ring position, across tiles
      for (int step = 0;; ++step) {
        const int tile_index = fwd_next_tile(p, step, tile_count);
        FwdTile tile;
        const bool past = tile_index >= tile_count;
        const bool has_tile = !past && fwd_tile<kBlockM>(p, tile_index, tile);
        if (!past && !has_tile) continue;  // a packed batch's slot that holds no tile
        FlashSeq seq;
        FwdKeyRange keys{0, 0};
        int m0 = 0;  // the tile's first row; < 0 (Note [top-aligned tiles]): TMA zero-fills those rows
        if (has_tile) {
          seq = flash_seq(p, tile.b);
          m0 = fwd_tile_row0<kBlockM, kBlockN>(p, seq, tile.m_block);
          keys = fwd_key_range<Masked, kBlockM, kBlockN>(seq, m0);
        }
        // Hand the tile (or the end) on through its Q slot's q_full once the consumers are done with the slot's
        // last Q (the tile kQSlots before this one).
        const int qs = handed % C::kQSlots;
        if (handed >= C::kQSlots) mbar_wait(&q_empty[qs], ((handed - C::kQSlots) / C::kQSlots) & 1);
        s_tile[qs] = past ? tile_count : tile_index;
        ++handed;
        if (keys.n_tiles == 0) {  // the end, or rows that see no key: nothing to load
          mbar_arrive(&q_full[qs]);
          if (past) break;
          continue;
        }
        // TMA coordinates: packed batches are one (total, H, D) tensor, their sequences rows of it.
        const int hk = tile.h / flash_group(p), tma_b = flash_map_batch(p, tile.b);
        const int q_row = static_cast<int>(seq.q_row0) + m0, k_row = static_cast<int>(seq.k_row0);
        mbar_arrive_expect_tx(&q_full[qs], C::kQBytes);
        for (int c = 0; c < kChunks; ++c)
          tma_load_4d(sQ + qs * C::kQBytes + c * kBlockM * kSwB, &maps.q, &q_full[qs], c * kSwE, q_row, tile.h, tma_b);
        // Key tiles are walked from the last to the first, so the masked ones (diagonal, tail) come first.
        for (int it = 0; it < keys.n_tiles; ++it, ++ring) {
          const int n0 = keys.n_first + (keys.n_tiles - 1 - it) * kBlockN;
          const int s = ring % kStages;
          const uint32_t free_parity = ((ring / kStages) & 1) ^ 1;
          unsigned char* k_slot = sK + s * C::kKVBytes;
          unsigned char* v_slot = sV + s * C::kKVBytes;
          mbar_wait(&k_empty[s], free_parity);
          mbar_arrive_expect_tx(&k_full[s], C::kKVBytes);
          for (int c = 0; c < kChunks; ++c)
            tma_load_4d(k_slot + c * kBlockN * kSwB, &maps.k, &k_full[s], c * kSwE, k_row + n0, hk, tma_b);
          mbar_wait(&v_empty[s], free_parity);
          mbar_arrive_expect_tx(&v_full[s], C::kKVBytes);
          for (int c = 0; c < kChunks; ++c)
            tma_load_4d(v_slot + c * kBlockN * kSwB, &maps.v, &v_full[s], c * kSwE, k_row + n0, hk, tma_b);
        }
      }
    }
    return;
  }

  // ------------------------------------------------------------------ consumers
  regs_claim<C::kConsumerRegs>();
  const int wg = warpgroup - 1;               // rows [64 wg, 64 wg + 64) of the block
  const int t = threadIdx.x % 128;            // thread in the warpgroup
  const int warp = t / 32, lane = t % 32;
  // This thread's two rows of every accumulator, in the tile (wgmma D fragment: like mma.sync m16n8, per warp).
  const int r_a = wg * 64 + warp * 16 + lane / 4, r_b = r_a + 8;
  const int col_in_tile = 2 * (lane % 4);     // + 8 i + {0, 1} for the i-th 8-column block

  const uint32_t q_rows = smem_addr(sQ) + wg * 64 * kSwB;  // this group's rows of Q slot 0
  uint32_t q_base = q_rows;                                 // ... of the current tile's Q slot
  const uint32_t k_base = smem_addr(sK), v_base = smem_addr(sV);
  const float scale_log2 = p.scale * static_cast<float>(M_LOG2E);
  constexpr uint32_t kHiAtom = desc_hi<kSwB>(kAtomBytes);

  float acc_o[D / 2];
  float s_acc[kBlockN / 2];
  uint32_t p_frag[kBlockN / 16][4];
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.f, l_b = 0.f;
#pragma unroll
  for (int i = 0; i < D / 2; ++i) acc_o[i] = 0.f;
  // The current tile's mask bounds (the keys its rows see) and the key tiles it sees whole.
  int lo_a = 0, hi_a = 0, lo_b = 0, hi_b = 0;
  int2 whole = make_int2(0, 0);
  // Where the O and L of the tile in acc_o go (its first row of O and of L) and whether this thread's two rows exist
  // (Note [top-aligned tiles]: rows before the sequence; rows past its end).
  T* o_rows = nullptr;
  float* lse_rows = nullptr;
  bool keep_a = false, keep_b = false;
  // ... and, where O goes out by TMA stores, this group's rows of it as the map's coordinates, and whether the map may
  // take them (Note [O by TMA store]).
  int o_row = 0, o_head = 0, o_batch = 0;
  bool o_by_tma = false;

  // S = Q K^T for the K tile in slot s (issue only).
  // Descriptors from their two words, one add per k-step (desc_lo / desc_at, hopper_ptx.cuh).
  auto issue_qk = [&](int s) {
    const uint32_t a_lo = desc_lo(q_base, 16), b_lo = desc_lo(k_base + s * C::kKVBytes, 16);
#pragma unroll
    for (int kk = 0; kk < C::kDPad / 16; ++kk) {
      const int c = kk / (kSwE / 16), off = (kk % (kSwE / 16)) * 32;
      const uint64_t da = desc_at(a_lo, kHiAtom, c * kBlockM * kSwB + off);
      const uint64_t db = desc_at(b_lo, kHiAtom, c * kBlockN * kSwB + off);
      wgmma_ss<T, kBlockN>(s_acc, da, db, kk > 0);
    }
  };
  // S = Q K^T for the first `keys` keys of the K tile in slot s, into the first keys / 2 entries of s_acc (the seam
  // sets the rest to -inf once it is done; issue only; Note [half edge tile]). issue_qk and issue_pv are not written
  // through these two: routed through the generic lambdas, ptxas reorders the d = 128 causal kernel's softmax, and the
  // shipped kernels keep their schedule until the half edge variant is measured (then one pair goes).
  auto issue_qk_keys = [&](int s, auto keys) {
    constexpr int kKeys = decltype(keys)::value;
    float(&s_keys)[kKeys / 2] = *reinterpret_cast<float(*)[kKeys / 2]>(s_acc);
    const uint32_t a_lo = desc_lo(q_base, 16), b_lo = desc_lo(k_base + s * C::kKVBytes, 16);
#pragma unroll
    for (int kk = 0; kk < C::kDPad / 16; ++kk) {
      const int c = kk / (kSwE / 16), off = (kk % (kSwE / 16)) * 32;
      const uint64_t da = desc_at(a_lo, kHiAtom, c * kBlockM * kSwB + off);
      const uint64_t db = desc_at(b_lo, kHiAtom, c * kBlockN * kSwB + off);
      wgmma_ss<T, kKeys>(s_keys, da, db, kk > 0);
    }
  };
  // O += P V for the V tile in slot s over its first `keys` keys (issue only; Note [half edge tile]).
  auto issue_pv_keys = [&](int s, auto keys) {
    const uint32_t b_lo = desc_lo(v_base + s * C::kKVBytes, kBlockN * kSwB);
#pragma unroll
    for (int kk = 0; kk < decltype(keys)::value / 16; ++kk) {
      const uint64_t db = desc_at(b_lo, kHiAtom, kk * 16 * kSwB);
      wgmma_rs<T, D>(acc_o, p_frag[kk], db, 1);
    }
  };
  auto issue_pv = [&](int s) {
    const uint32_t b_lo = desc_lo(v_base + s * C::kKVBytes, kBlockN * kSwB);
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint64_t db = desc_at(b_lo, kHiAtom, kk * 16 * kSwB);
      wgmma_rs<T, D>(acc_o, p_frag[kk], db, 1);
    }
  };
  // The mask and key-tail masking; only tiles that cross a bound of the mask or the end of the keys call it. Each
  // row's visible keys [lo, hi] are fixed for the tile (with the bounds worked out per entry, the masked tiles cost
  // twice as much: 19 us more at the xl step's 4 x 25 x 512). Entry c = 8 i + e of a row is key n0 + col_in_tile + c:
  // with the bounds moved into the tile once, each entry compares a constant with one register per bound (a causal
  // mask has no lower one), not its key with two.
  const bool has_left = Masked && p.window_left >= 0;  // first_key is INT_MIN otherwise
  auto mask = [&](int n0) {
    const int base = n0 + col_in_tile;
    const int ha = hi_a - base, hb = hi_b - base;
    if (!has_left) {
#pragma unroll
      for (int i = 0; i < kBlockN / 8; ++i) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (8 * i + e > ha) s_acc[4 * i + e] = -INFINITY;
          if (8 * i + e > hb) s_acc[4 * i + 2 + e] = -INFINITY;
        }
      }
    } else {
      const int la = lo_a - base, lb = lo_b - base;
#pragma unroll
      for (int i = 0; i < kBlockN / 8; ++i) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (8 * i + e < la || 8 * i + e > ha) s_acc[4 * i + e] = -INFINITY;
          if (8 * i + e < lb || 8 * i + e > hb) s_acc[4 * i + 2 + e] = -INFINITY;
        }
      }
    }
  };
  auto needs_mask = [&](int n0) { return n0 < whole.x || n0 > whole.y; };
  // Online softmax, in place: S becomes P = exp(S - m) (fp32, still in s_acc), m and l are updated,
  // and fa / fb return the factors exp(m_old - m_new) that rescale O. p_frag is not touched, so this
  // runs while the previous tile's P V (which reads p_frag) is still in flight.
  auto softmax = [&](float& fa, float& fb) {
    float mx_a = m_a, mx_b = m_b;
#pragma unroll
    for (int i = 0; i < kBlockN / 8; ++i) {
      mx_a = fmaxf(mx_a, fmaxf(s_acc[4 * i], s_acc[4 * i + 1]));
      mx_b = fmaxf(mx_b, fmaxf(s_acc[4 * i + 2], s_acc[4 * i + 3]));
    }
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
      mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, o));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, o));
    }
    // A row whose keys are all masked so far keeps max -inf; subtracting 0 then gives exp(-inf) = 0.
    const float base_a = mx_a == -INFINITY ? 0.f : mx_a * scale_log2;
    const float base_b = mx_b == -INFINITY ? 0.f : mx_b * scale_log2;
    fa = fast_exp2(m_a * scale_log2 - base_a);
    fb = fast_exp2(m_b * scale_log2 - base_b);
    m_a = mx_a, m_b = mx_b;
    float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
    for (int i = 0; i < kBlockN / 8; ++i) {
      s_acc[4 * i] = fast_exp2(fmaf(s_acc[4 * i], scale_log2, -base_a));
      s_acc[4 * i + 1] = fast_exp2(fmaf(s_acc[4 * i + 1], scale_log2, -base_a));
      s_acc[4 * i + 2] = fast_exp2(fmaf(s_acc[4 * i + 2], scale_log2, -base_b));
      s_acc[4 * i + 3] = fast_exp2(fmaf(s_acc[4 * i + 3], scale_log2, -base_b));
      sum_a += s_acc[4 * i] + s_acc[4 * i + 1];
      sum_b += s_acc[4 * i + 2] + s_acc[4 * i + 3];
    }
    l_a = l_a * fa + sum_a;
    l_b = l_b * fb + sum_b;
  };
  // P (fp32 in s_acc) -> p_frag in the input dtype. 8-column block i is half of the 16-key step i / 2:
  // its rows a / b go to a[0] / a[1] (i even) or a[2] / a[3] (i odd), the A-fragment order of wgmma
  // (the same as mma.sync m16n8k16).
  auto convert_p = [&] {
#pragma unroll
    for (int i = 0; i < kBlockN / 8; ++i) {
      p_frag[i / 2][(i % 2) * 2] = pack2<T>(s_acc[4 * i], s_acc[4 * i + 1]);
      p_frag[i / 2][(i % 2) * 2 + 1] = pack2<T>(s_acc[4 * i + 2], s_acc[4 * i + 3]);
    }
  };
  auto rescale_o = [&](float fa, float fb) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      acc_o[4 * i] *= fa, acc_o[4 * i + 1] *= fa;
      acc_o[4 * i + 2] *= fb, acc_o[4 * i + 3] *= fb;
    }
  };
  // Epilogue of the tile in acc_o: O / l in the input dtype, L = m * scale + log l (natural log, like the mma.sync
  // kernel), then acc_o, m and l start over for the next tile.
  auto store_tile = [&] {
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
      l_a += __shfl_xor_sync(0xffffffffu, l_a, o);
      l_b += __shfl_xor_sync(0xffffffffu, l_b, o);
    }
    const float inv_a = l_a > 0.f ? 1.f / l_a : 0.f, inv_b = l_b > 0.f ? 1.f / l_b : 0.f;
    bool staged = false;
    if constexpr (C::kTmaStoreO) {
      if (o_by_tma) {
        unsigned char* stage = smem + C::kOOffset + wg * C::kOGroupBytes;
        if (t == 0) bulk_wait_read<0>();  // the group's last store has read the staging
        named_sync(kBarOStage + wg, 128);
        const int row_a = warp * 16 + lane / 4;  // in the group's 64 rows
#pragma unroll
        for (int i = 0; i < D / 8; ++i) {
          const int col = 8 * i + col_in_tile;
          unsigned char* chunk = stage + (col / kSwE) * 64 * kSwB;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int off = (row_a + 8 * h) * kSwB + (col % kSwE) * 2;
            const float inv = h ? inv_b : inv_a;
            *reinterpret_cast<uint32_t*>(chunk + (off ^ (((off >> 7) & (kSwB / 16 - 1)) << 4))) =
                pack2<T>(acc_o[4 * i + 2 * h] * inv, acc_o[4 * i + 2 * h + 1] * inv);
          }
        }
        fence_proxy_async_smem();  // the staging stores before the TMA store (async proxy) reads them
        named_sync(kBarOStage + wg, 128);
        if (t == 0) {
          for (int c = 0; c < kChunks; ++c)
            tma_store_4d(stage + c * 64 * kSwB, &maps.o, c * kSwE, o_row, o_head, o_batch);
          bulk_commit();
        }
        staged = true;
      }
    }
    if (!staged) {
#pragma unroll
      for (int i = 0; i < D / 8; ++i) {
        const int col = 8 * i + col_in_tile;
        if (keep_a)
          *reinterpret_cast<uint32_t*>(o_rows + r_a * p.o_row_stride + col) =
              pack2<T>(acc_o[4 * i] * inv_a, acc_o[4 * i + 1] * inv_a);
        if (keep_b)
          *reinterpret_cast<uint32_t*>(o_rows + r_b * p.o_row_stride + col) =
              pack2<T>(acc_o[4 * i + 2] * inv_b, acc_o[4 * i + 3] * inv_b);
      }
    }
    if (lane % 4 == 0) {
      if (keep_a) lse_rows[r_a] = l_a > 0.f ? m_a * p.scale + logf(l_a) : INFINITY;
      if (keep_b) lse_rows[r_b] = l_b > 0.f ? m_b * p.scale + logf(l_b) : INFINITY;
    }
#pragma unroll
    for (int i = 0; i < D / 2; ++i) acc_o[i] = 0.f;
    m_a = m_b = -INFINITY, l_a = l_b = 0.f;
  };
  // Note [ping-pong]. With kPingPong the two consumer warpgroups take turns issuing their GEMMs (named
  // barriers 1 and 2): while one group's wgmmas run, the other does its softmax, so the exponentials of
  // one group hide under the other's tensor-core work on top of the overlap inside each group. Every
  // issue is bracketed by turn_begin / turn_end; group 1 starts by handing group 0 the first turn and
  // skips its last hand-over (the block's last issue), so every bar.sync meets exactly one bar.arrive.
  auto turn_begin = [&] {
    if constexpr (C::kPingPong) named_sync(1 + wg, 256);
  };
  auto turn_end = [&](bool last) {
    if constexpr (C::kPingPong)
      if (!(last && wg == 1)) named_arrive(1 + (wg ^ 1), 256);
  };
  if constexpr (C::kPingPong)
    if (wg == 1) named_arrive(1, 256);

  // Note [tile seam]. A tile's last P V is issued together with the next tile's first S (their wgmmas run back to
  // back), and the tile's epilogue runs while that S is in flight; so the tensor cores see no gap between two tiles
  // but the next tile's first softmax. `pending`: acc_o holds a tile whose last P V (its V at ring position
  // pv_pos) is still to issue.
  // A whole key tile, and its first half where the variant runs half edge tiles (Note [half edge tile]).
  using AllKeys = std::integral_constant<int, kBlockN>;
  using HalfKeys = std::integral_constant<int, C::kHalfEdge && Masked ? kBlockN / 2 : kBlockN>;
  bool pending = false;
  int pv_pos = 0;  // the ring position of the pending tile's last V
  auto wait_last_v = [&] { mbar_wait(&v_full[pv_pos % kStages], (pv_pos / kStages) & 1); };
  auto release_last_v = [&] {
    fence_regs(acc_o);
    fence_regs(p_frag);
    __syncwarp();
    if (lane == 0) mbar_arrive(&v_empty[pv_pos % kStages]);
  };
  // The pending tile's last P V on its own (no tile follows, or the next one sees no key), and its epilogue.
  auto finish_pending = [&](bool last) {
    wait_last_v();
    turn_begin();
    wgmma_fence();
    issue_pv(pv_pos % kStages);
    wgmma_commit();
    turn_end(last);
    wgmma_wait<0>();
    release_last_v();
    store_tile();
    pending = false;
  };

  int handed = 0;  // tiles the producer handed on (q_full's phase), the end included
  int ring = 0;    // K/V tiles consumed so far: the ring position, across tiles
  for (;;) {
    const int qs = handed % C::kQSlots;
    mbar_wait(&q_full[qs], (handed / C::kQSlots) & 1);  // the next tile's index; its Q too when it has keys to see
    ++handed;
    const int tile_index = s_tile[qs];
    if (tile_index >= tile_count) break;
    q_base = q_rows + qs * C::kQBytes;
    FwdTile tile;
    fwd_tile<kBlockM>(p, tile_index, tile);  // the producer hands on only slots that hold a tile
    const FlashSeq seq = flash_seq(p, tile.b);
    const int m0 = fwd_tile_row0<kBlockM, kBlockN>(p, seq, tile.m_block);
    const FwdKeyRange keys = fwd_key_range<Masked, kBlockM, kBlockN>(seq, m0);
    const int n_first = keys.n_first, n_tiles = keys.n_tiles;
    if (n_tiles == 0) {
      // Rows that see no key at all (the whole tile): O = 0, L = +inf, nothing loaded.
      mbar_arrive(&q_empty[qs]);  // the index is read: the producer may hand on the next
      if (pending) finish_pending(false);
    } else {
      const int s0 = ring % kStages;
      // No row of this group sees the second half of the first key tile (Note [half edge tile]); broadcast from lane
      // 0 so ptxas sees the branches around the wgmmas warp-uniform.
      const bool half_edge =
          C::kHalfEdge && Masked && __shfl_sync(0xffffffffu, seq.last_key<Masked>(m0 + 64 * wg + 63) <
                                                       n_first + (n_tiles - 1) * kBlockN + kBlockN / 2, 0);
      mbar_wait(&k_full[s0], (ring / kStages) & 1);
      // First key tile: S beside the last tile's last P V (Note [tile seam]), or S alone.
      auto seam = [&](auto keys) {
        wait_last_v();
        turn_begin();
        wgmma_fence();
        issue_pv(pv_pos % kStages);
        wgmma_commit();
        if constexpr (decltype(keys)::value == kBlockN) {
          issue_qk(s0);
          wgmma_commit();
          turn_end(false);
          wgmma_wait<1>();  // the last tile's P V is done; this tile's S may still run under its epilogue
          release_last_v();
          store_tile();
          pending = false;
          wgmma_wait<0>();
        } else {
          issue_qk_keys(s0, keys);
          wgmma_commit();
          turn_end(false);
          wgmma_wait<0>();
          release_last_v();
          store_tile();
          pending = false;
#pragma unroll
          for (int i = decltype(keys)::value / 2; i < kBlockN / 2; ++i) s_acc[i] = -INFINITY;  // (P = 0 there)
        }
      };
      if (half_edge && pending) {
        seam(HalfKeys{});  // (HalfKeys is AllKeys, and half_edge false, where the variant has no half tiles)
      } else if (pending) {
        seam(AllKeys{});
      } else {
        turn_begin();
        wgmma_fence();
        issue_qk(s0);
        wgmma_commit();
        turn_end(false);
        wgmma_wait<0>();
      }
      fence_regs(s_acc);
      __syncwarp();
      if (lane == 0) mbar_arrive(&k_empty[s0]);
      // This tile's rows, mask bounds and output (the epilogue above wrote the last tile's with the old ones).
      const int row_a = m0 + r_a, row_b = m0 + r_b;
      lo_a = seq.first_key<Masked>(row_a), hi_a = seq.last_key<Masked>(row_a);
      lo_b = seq.first_key<Masked>(row_b), hi_b = seq.last_key<Masked>(row_b);
      whole = seq.whole_key_tiles<Masked>(m0, kBlockM, kBlockN);  // every row of the tile sees them all
      {
        const int n0 = n_first + (n_tiles - 1) * kBlockN;
        if (needs_mask(n0)) mask(n0);
        float fa, fb;
        softmax(fa, fb);
        convert_p();
      }
      // Key tile `it` (from the last): its S beside the last one's P V over pv_keys keys.
      auto key_step = [&](int it, auto pv_keys) {
        const int n0 = n_first + (n_tiles - 1 - it) * kBlockN;
        const int pos = ring + it;
        const int s = pos % kStages, s_prev = (pos - 1) % kStages;
        const uint32_t parity = (pos / kStages) & 1, parity_prev = ((pos - 1) / kStages) & 1;
        mbar_wait(&k_full[s], parity);
        mbar_wait(&v_full[s_prev], parity_prev);
        turn_begin();
        wgmma_fence();
        issue_qk(s);
        wgmma_commit();
        if constexpr (decltype(pv_keys)::value == kBlockN)
          issue_pv(s_prev);
        else
          issue_pv_keys(s_prev, pv_keys);
        wgmma_commit();
        turn_end(false);
        wgmma_wait<1>();  // S of this tile is done; P V of the previous one may still run
        fence_regs(s_acc);
        __syncwarp();
        if (lane == 0) mbar_arrive(&k_empty[s]);
        if (needs_mask(n0)) mask(n0);
        float fa, fb;
        softmax(fa, fb);  // overlaps the previous tile's P V
        wgmma_wait<0>();
        fence_regs(acc_o);
        fence_regs(p_frag);  // keeps the in-flight A operand's registers live until here
        __syncwarp();
        if (lane == 0) mbar_arrive(&v_empty[s_prev]);
        rescale_o(fa, fb);
        convert_p();
      };
      int it = 1;
      if (half_edge && n_tiles > 1) key_step(it++, HalfKeys{});
      for (; it < n_tiles; ++it) key_step(it, AllKeys{});
      // Every S of this tile is done (and the index read): the producer may load the next tile's Q.
      mbar_arrive(&q_empty[qs]);
      pv_pos = ring + n_tiles - 1;
      pending = true;
      ring += n_tiles;
    }
    o_rows = static_cast<T*>(p.o) + tile.b * p.o_batch_stride + tile.h * p.o_head_stride +
             (seq.q_row0 + m0) * p.o_row_stride;
    lse_rows = p.lse + seq.stat_row0(tile.h) + m0;
    keep_a = m0 + r_a >= 0 && m0 + r_a < seq.len_q, keep_b = m0 + r_b >= 0 && m0 + r_b < seq.len_q;
    if constexpr (C::kTmaStoreO) {
      // A dense sequence is the map's rows, which clips those before and past it; in a packed batch they are the
      // neighbours' rows, so a group with such rows stores from registers.
      const int g0 = m0 + 64 * wg;
      o_by_tma = !flash_varlen(p) || (g0 >= 0 && g0 + 64 <= seq.len_q);
      o_row = static_cast<int>(seq.q_row0) + g0, o_head = tile.h, o_batch = flash_map_batch(p, tile.b);
    }
    if (n_tiles == 0) store_tile();  // acc_o, m and l are as store_tile left them: O = 0, L = +inf
  }
  if (pending) finish_pending(true);
  else if constexpr (C::kPingPong) {
    // No issue ended the block (its last tile saw no key, or it had none): group 0 takes the hand-over that
    // group 1's first arrival or last turn left it, so the named barriers end balanced.
    if (wg == 0) named_sync(1, 256);
  }
  if constexpr (C::kTmaStoreO)
    if (t == 0) bulk_wait_all();  // the block's shared memory outlives its last stores
}

}  // namespace lmscale::kernels::hopper
