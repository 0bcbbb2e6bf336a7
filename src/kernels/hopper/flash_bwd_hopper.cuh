// FlashAttention backward for Hopper (sm_90a), docs/spec.md §3.2: the main kernel only (dK, dV in the
// input dtype, dQ added in fp32 into p.dq_accum). The preprocess (D = rowsum(dO ∘ O), dq_accum zeroed) and
// the dq_accum -> dq conversion are the mma.sync backward's kernels (flash_bwd_kernel.cuh), launched
// around this one by run_flash_bwd (flash_api.cu).
//
//   * one block per 128 keys: warpgroup 0 is the producer, warpgroups 1 and 2 are consumers owning 64
//     keys each, with dK and dV of their keys in registers for the whole block;
//   * producer: one thread loads K and V once, then Q and dO of every 64-query tile by TMA into a ring of
//     kStages slots; a second warp writes L (in the exp2 domain) and D of the same rows into the slot;
//   * consumers, per query tile, in transposed form (keys on the wgmma M side, Note [bwd in transposed
//     form] in flash_bwd_kernel.cuh): S^T = K Q^T and dP^T = V dO^T (both operands in shared memory),
//     P^T = exp2(S^T scale - L), dS^T = P^T ∘ (dP^T - D) in registers; dV += P^T dO and dK += dS^T Q
//     with P^T / dS^T straight from registers; dS goes to shared memory once (transposed on the store)
//     for dQ = dS K over all 128 keys of the block (each group computes half of it, Note [dQ split]), whose fp32
//     result is added to dq_accum with 16-byte red.global.add (no second pass over K and V:
//     docs/flash_notes.md, Hopper backward).
//
// Layouts and descriptors are the forward's (Note [descriptors] in flash_fwd_hopper.cuh): tiles exactly as
// TMA writes them with the 128- or 64-byte swizzle; d = 80 is padded to 96 by TMA's zero fill.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <type_traits>

#include "kernels/flash_params.h"
#include "kernels/hopper/flash_fwd_hopper.cuh"  // pack2
#include "kernels/hopper/hopper_ptx.cuh"
#include "kernels/hopper/wgmma_ops.cuh"

namespace lmscale::kernels::hopper {

// kPipelined_: Note [bwd pipeline]; -1 picks it per head dim and causality (the shipped choice). kBlockM_: queries per
// tile, 64 or 128 (then S^T / dP^T are 64 x 128 per group and dQ's rows, not columns, split between the
// groups: Note [dQ split]).
template <typename T_, int D_, int kPipelined_ = -1, int kBlockM_ = 64>
struct BwdConfig {
  using T = T_;
  static constexpr int D = D_;
  static constexpr int kConsumers = 2;
  static constexpr int kKeysPerGroup = 64;  // one wgmma M per consumer warpgroup
  static constexpr int kBlockN = kKeysPerGroup * kConsumers;
  static constexpr int kBlockM = kBlockM_;  // queries per tile: the N of S^T and dP^T
  // d = 128 uses the 128-byte swizzle; 64 and 80 the 64-byte one (32-column chunks), so dQ's columns
  // split between the two groups at a chunk boundary (kDqSplit).
  static constexpr int kSwizzleBytes = D == 128 ? 128 : 64;
  static constexpr int kSwizzleElems = kSwizzleBytes / 2;
  static constexpr int kDPad = (D + kSwizzleElems - 1) / kSwizzleElems * kSwizzleElems;
  static constexpr int kChunks = kDPad / kSwizzleElems;
  static constexpr int kQBytes = kBlockM * kDPad * 2;   // one Q (or dO) slot
  static constexpr int kKVBytes = kBlockN * kDPad * 2;  // K (or V) of the block
  static constexpr int kDSBytes = kBlockM * kKeysPerGroup * 2;  // one consumer's dS tile (128-byte rows)
  static constexpr int kRowBytes = kBlockM * 4;                 // L or D of one slot
  static constexpr int kFixedBytes = 2 * kKVBytes + 2 * kConsumers * kDSBytes;
  static constexpr int kStageBytes = 2 * kQBytes + 2 * kRowBytes;
  static constexpr int kStagesFit = (227 * 1024 - 2048 - kFixedBytes) / kStageBytes;
  static constexpr int kStages = kStagesFit > 4 ? 4 : kStagesFit;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
  // Note [dQ split]. dQ = dS K over all 128 keys of the block, split between the two groups. 64-query
  // tiles split its columns: group 0 adds [0, kDqSplit), group 1 [kDqSplit, D) (64 | 64, 32 | 32, 32 | 48),
  // each start on a swizzle chunk; both compute kDqN columns (group 0's last 16 at d = 80 are discarded),
  // so both run the same wgmma (ptxas serialises wgmmas on paths it cannot prove uniform). 128-query tiles
  // split its rows: group g computes rows [64 g, 64 g + 64) of the tile, all D columns.
  static constexpr bool kDqRowSplit = kBlockM == 128;
  static constexpr int kDqSplit = kDqRowSplit ? D : D / 2 / kSwizzleElems * kSwizzleElems;
  static constexpr int kDqN = kDqRowSplit ? D : D - kDqSplit;
  // Note [bwd pipeline]: tile j's S^T / dP^T are issued together with tile j-1's dV / dK / dQ, so they run
  // while the group adds tile j-1's dQ. Both tiles' accumulators are then live (about 64 + D + kDqN / 2 +
  // 96 registers): never at d = 128. Shipped only where it measured faster (H100, docs/flash_notes.md,
  // backward v3/v4): d = 64 causal (5.17 vs 5.44 ms at 16k); the non-causal kernels spill (72 B at d = 64,
  // 232 B at d = 80) and lose (10.76 vs 10.34 ms; 3.23 vs 2.20 ms), d = 80 causal ties.
  template <bool Causal>
  static constexpr bool kPipelinedFor = kPipelined_ < 0 ? D == 64 && Causal : kPipelined_ != 0;
  static_assert(kBlockM == 64 || (kBlockM == 128 && kPipelined_ == 0), "128-query tiles run one tile at a time");
  // Shared memory (every tile 1024-byte aligned for the swizzle atoms): K, V, dS per consumer twice
  // (tiles alternate, Note [dS buffers]), the Q and dO slots, then L and D per slot, then the barriers.
  static constexpr int kOffV = kKVBytes;
  static constexpr int kOffDS = 2 * kKVBytes;
  static constexpr int kOffQ = kOffDS + 2 * kConsumers * kDSBytes;
  static constexpr int kOffDO = kOffQ + kStages * kQBytes;
  static constexpr int kOffL = kOffDO + kStages * kQBytes;
  static constexpr int kOffDsum = kOffL + kStages * kRowBytes;
  static constexpr int kBarrierOffset = kOffDsum + kStages * kRowBytes;
  static constexpr int kSmemBytes = kBarrierOffset + (1 + 2 * kStages) * 8 + 1024;
  static_assert(kStages >= 2, "Q/dO need double buffering");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one block");
  static_assert(D % 16 == 0 && D <= 256 && kDqSplit % 16 == 0 && kDqN % 16 == 0, "wgmma N is a multiple of 8");
};

struct BwdMaps {
  CUtensorMap q, k, v, dout;
};

template <typename C, bool Causal>
__global__ void __launch_bounds__(C::kThreads, 1) flash_bwd_hopper_kernel(const __grid_constant__ BwdMaps maps,
                                                                          const FlashParams p) {
  using T = typename C::T;
  constexpr int D = C::D;
  constexpr int kBlockM = C::kBlockM, kBlockN = C::kBlockN, kStages = C::kStages;
  constexpr int kSwB = C::kSwizzleBytes, kSwE = C::kSwizzleElems, kChunks = C::kChunks;
  constexpr int kAtomBytes = 8 * kSwB;

  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = align_1024(smem_raw);
  unsigned char* sK = smem;
  unsigned char* sV = smem + C::kOffV;
  unsigned char* sQ = smem + C::kOffQ;
  unsigned char* sdO = smem + C::kOffDO;
  float* sL = reinterpret_cast<float*>(smem + C::kOffL);
  float* sDsum = reinterpret_cast<float*>(smem + C::kOffDsum);
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + C::kBarrierOffset);
  uint64_t* kv_full = bar;
  uint64_t* q_full = bar + 1;         // Q, dO (TMA bytes) and L, D (32 arrivals of the row warp) landed
  uint64_t* q_empty = q_full + kStages;  // every consumer warp is done with the slot

  // Note [grid order] (flash_fwd_kernel.cuh): small key blocks have the most causal query tiles, so first.
  const int n_block = blockIdx.y;
  const int bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads;
  const int n0 = n_block * kBlockN;
  // Causal: query tiles wholly before the block's first key see none of its keys and are skipped.
  const int m_first = Causal ? n0 / kBlockM : 0;
  const int m_tiles = (p.seqlen_q + kBlockM - 1) / kBlockM;
  const int warpgroup = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    mbar_init(kv_full, 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&q_full[s], 1 + 32);
      mbar_init(&q_empty[s], 4 * C::kConsumers);
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
        tma_load_4d(sK + c * kBlockN * kSwB, &maps.k, kv_full, c * kSwE, n0, h, b);
        tma_load_4d(sV + c * kBlockN * kSwB, &maps.v, kv_full, c * kSwE, n0, h, b);
      }
      for (int m = m_first, it = 0; m < m_tiles; ++m, ++it) {
        const int s = it % kStages;
        mbar_wait(&q_empty[s], ((it / kStages) & 1) ^ 1);
        mbar_arrive_expect_tx(&q_full[s], 2 * C::kQBytes);
        for (int c = 0; c < kChunks; ++c) {
          tma_load_4d(sQ + s * C::kQBytes + c * kBlockM * kSwB, &maps.q, &q_full[s], c * kSwE, m * kBlockM, h, b);
          tma_load_4d(sdO + s * C::kQBytes + c * kBlockM * kSwB, &maps.dout, &q_full[s], c * kSwE, m * kBlockM, h, b);
        }
      }
    } else if (warp == 1) {
      // L (natural log, from the forward) goes into the exp2 domain here; rows past the end get L = +inf
      // and D = 0, so their P and dS are exactly 0 without a row mask.
      const float* gL = p.lse + static_cast<int64_t>(bh) * p.seqlen_q;
      const float* gDsum = p.dsum + static_cast<int64_t>(bh) * p.seqlen_q;
      for (int m = m_first, it = 0; m < m_tiles; ++m, ++it) {
        const int s = it % kStages;
        mbar_wait(&q_empty[s], ((it / kStages) & 1) ^ 1);
#pragma unroll
        for (int r = lane; r < kBlockM; r += 32) {
          const int row = m * kBlockM + r;
          sL[s * kBlockM + r] = row < p.seqlen_q ? gL[row] * static_cast<float>(M_LOG2E) : INFINITY;
          sDsum[s * kBlockM + r] = row < p.seqlen_q ? gDsum[row] : 0.f;
        }
        mbar_arrive(&q_full[s]);
      }
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
  // Accumulators that a wgmma starts from zero are declared where their tile begins (S^T, dP^T, dQ): the
  // wrappers' "+f" operands read them, so an array declared outside the loop would keep the previous
  // tile's values live until the next wgmma overwrote them.
  using SAcc = float[kBlockM / 2];
  using DqAcc = float[C::kDqN / 2];
  uint32_t p_frag[kBlockM / 16][4], ds_frag[kBlockM / 16][4];
  float* gdQacc = p.dq_accum + static_cast<int64_t>(bh) * p.seqlen_q * D;

  // S^T = K Q^T or dP^T = V dO^T (issue only): A = this group's 64 rows of K (V), B = the Q (dO) slot,
  // both K-major over the head dim.
  auto issue_kq = [&](float(&acc)[kBlockM / 2], uint32_t a_base, uint32_t b_slot) {
#pragma unroll
    for (int kk = 0; kk < C::kDPad / 16; ++kk) {
      const int c = kk / (kSwE / 16), off = (kk % (kSwE / 16)) * 32;
      const uint64_t da = smem_desc<kSwB>(a_base + c * kBlockN * kSwB + off, 16, kAtomBytes);
      const uint64_t db = smem_desc<kSwB>(b_slot + c * kBlockM * kSwB + off, 16, kAtomBytes);
      wgmma_ss<T, kBlockM>(acc, da, db, kk > 0);
    }
  };
  // acc (64 keys x D) += frag (P^T or dS^T in registers, 64 keys x kBlockM queries) * slot (kBlockM
  // queries x D: dO or Q, N-major).
  auto issue_acc_rs = [&](float(&acc)[D / 2], const uint32_t(&frag)[kBlockM / 16][4], uint32_t slot) {
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk) {
      const uint64_t db = smem_desc<kSwB>(slot + kk * 16 * kSwB, kBlockM * kSwB, kAtomBytes);
      wgmma_rs<T, D>(acc, frag[kk], db, 1);
    }
  };
  // This group's part of dQ (Note [dQ split]): first row in the tile, first column, columns it adds.
  const int dq_row0 = C::kDqRowSplit ? wg * 64 : 0;
  const int dq_col0 = C::kDqRowSplit || wg == 0 ? 0 : C::kDqSplit;
  const int dq_cols_added = C::kDqRowSplit ? D : wg == 0 ? C::kDqSplit : C::kDqN;
  // dQ columns [col0, col0 + N) of 64 query rows = dS (those rows x 128 keys: both groups' tiles in buffer
  // `buf`, K-major, 128-byte swizzle) * K (128 keys x N, N-major).
  auto issue_dq = [&](float(&acc)[C::kDqN / 2], int col0, int buf) {
    constexpr int N = C::kDqN;
    // Row split: this group's 64 query rows of both dS tiles (128-byte rows, 8-row atoms stay aligned).
    const uint32_t ds_buf = smem_addr(smem + C::kOffDS + buf * C::kConsumers * C::kDSBytes) + dq_row0 * 128;
    const uint32_t k_cols = smem_addr(sK) + (col0 / kSwE) * kBlockN * kSwB;
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const int g = kk / (C::kKeysPerGroup / 16), off = (kk % (C::kKeysPerGroup / 16)) * 32;
      const uint64_t da = smem_desc<128>(ds_buf + g * C::kDSBytes + off, 16, 1024);
      const uint64_t db = smem_desc<kSwB>(k_cols + kk * 16 * kSwB, kBlockN * kSwB, kAtomBytes);
      wgmma_ss_bt<T, N>(acc, da, db, kk > 0);
    }
  };
  // This group's dQ columns of the tile at m0 into dq_accum (unscaled; the convert kernel applies the
  // softmax scale). Lanes 2k and 2k+1 hold columns {0,1} and {2,3} of the same 4-column group for rows a
  // and b: one shuffle gives the even lane row a's four columns and the odd lane row b's, so every add is
  // one 16-byte red.
  auto add_dq = [&](const float(&acc)[C::kDqN / 2], int col0, int n_add, int m0) {
    constexpr int N = C::kDqN;
    const bool odd = lane & 1;
    const int q = m0 + dq_row0 + warp * 16 + lane / 4 + (odd ? 8 : 0);
    float* dst = gdQacc + static_cast<int64_t>(q) * D + col0 + col_in_tile - (odd ? 2 : 0);
#pragma unroll
    for (int i = 0; i < N / 8; ++i) {
      const float x = __shfl_xor_sync(0xffffffffu, odd ? acc[4 * i] : acc[4 * i + 2], 1);
      const float y = __shfl_xor_sync(0xffffffffu, odd ? acc[4 * i + 1] : acc[4 * i + 3], 1);
      if (q < p.seqlen_q && 8 * i < n_add) {
        if (odd)
          red_add_v4(dst + 8 * i, x, y, acc[4 * i + 2], acc[4 * i + 3]);
        else
          red_add_v4(dst + 8 * i, acc[4 * i], acc[4 * i + 1], x, y);
      }
    }
  };
  // Note [dS buffers]. dQ needs both groups' dS, so the groups meet at named barrier 1 after writing it;
  // tiles alternate between two dS buffers, so a group may write the next tile's dS while the other still
  // reads this one, and the barrier of that next tile guarantees the older buffer is no longer read.
  // S^T and dP^T of the tile in slot s (two commit groups).
  auto issue_sdp = [&](SAcc& s_acc, SAcc& dp_acc, int s) {
    const uint32_t q_slot = smem_addr(sQ + s * C::kQBytes), do_slot = smem_addr(sdO + s * C::kQBytes);
    issue_kq(s_acc, k_group, q_slot);
    wgmma_commit();
    issue_kq(dp_acc, v_group, do_slot);
    wgmma_commit();
  };
  // Waits for S^T / dP^T of the tile at m0 (slot s, the two most recent commit groups), then P^T, dS^T and
  // their A fragments in registers, and dS into buffer `buf` for dQ; ends at the barrier that tells both
  // groups every dS of the tile is written. A group whose keys all lie after the tile's queries (causal) or
  // past the end runs the tile anyway, fully masked (P = dS = 0): ptxas serialises wgmmas on paths it
  // cannot prove uniform.
  auto softmax_grad = [&](SAcc& s_acc, SAcc& dp_acc, int s, int m0, int buf) {
    unsigned char* ds_tile = smem + C::kOffDS + (buf * C::kConsumers + wg) * C::kDSBytes;
    const float* l_s = sL + s * kBlockM;
    const float* dsum_s = sDsum + s * kBlockM;
    wgmma_wait<1>();
    fence_regs(s_acc);
    // P^T = exp2(S^T scale log2e - L log2e); only the diagonal tile and the key tail are masked.
    const bool masked = key0 + C::kKeysPerGroup > p.seqlen_k || (Causal && m0 < key0 + C::kKeysPerGroup - 1);
#pragma unroll
    for (int i = 0; i < kBlockM / 8; ++i) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int q_local = 8 * i + col_in_tile + e;
        const float l = l_s[q_local];
        float pa = fast_exp2(fmaf(s_acc[4 * i + e], scale_log2, -l));
        float pb = fast_exp2(fmaf(s_acc[4 * i + 2 + e], scale_log2, -l));
        if (masked) {
          const int q = m0 + q_local;
          if (key_a >= p.seqlen_k || (Causal && key_a > q)) pa = 0.f;
          if (key_b >= p.seqlen_k || (Causal && key_b > q)) pb = 0.f;
        }
        s_acc[4 * i + e] = pa;
        s_acc[4 * i + 2 + e] = pb;
      }
    }
    wgmma_wait<0>();
    fence_regs(dp_acc);
    // dS^T = P^T ∘ (dP^T - D); P^T and dS^T into the A-fragment order (convert_p in the forward), and dS
    // transposed into shared memory: ds_tile[query][key], 128-byte rows with the 128-byte swizzle
    // (16-byte unit u of row r lives at unit u ^ (r % 8)), the K-major A operand of dQ = dS K. One
    // 8-column block at a time, so each block's fp32 values die as soon as they are packed.
#pragma unroll
    for (int i = 0; i < kBlockM / 8; ++i) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int q_local = 8 * i + col_in_tile + e;
        const float dsum = dsum_s[q_local];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float& ds = dp_acc[4 * i + 2 * r + e];
          ds = s_acc[4 * i + 2 * r + e] * (ds - dsum);
          const int key = key_local_a + 8 * r;
          const int byte = q_local * 128 + ((((key * 2) / 16) ^ (q_local % 8)) * 16) + (key * 2) % 16;
          *reinterpret_cast<uint16_t*>(ds_tile + byte) = static_cast<uint16_t>(pack2<T>(ds, 0.f) & 0xffffu);
        }
      }
      p_frag[i / 2][(i % 2) * 2] = pack2<T>(s_acc[4 * i], s_acc[4 * i + 1]);
      p_frag[i / 2][(i % 2) * 2 + 1] = pack2<T>(s_acc[4 * i + 2], s_acc[4 * i + 3]);
      ds_frag[i / 2][(i % 2) * 2] = pack2<T>(dp_acc[4 * i], dp_acc[4 * i + 1]);
      ds_frag[i / 2][(i % 2) * 2 + 1] = pack2<T>(dp_acc[4 * i + 2], dp_acc[4 * i + 3]);
    }
    fence_proxy_async_smem();            // the st.shared of dS before the wgmma (async proxy) reads it
    named_sync(1, 128 * C::kConsumers);  // both groups' dS written (Note [dS buffers])
  };
  // dV += P^T dO, dK += dS^T Q (one commit group) and this group's columns of dQ (another) for the tile in
  // slot s whose dS is in buffer `buf`.
  auto issue_grads = [&](DqAcc& acc_dq, int s, int buf) {
    const uint32_t q_slot = smem_addr(sQ + s * C::kQBytes), do_slot = smem_addr(sdO + s * C::kQBytes);
    issue_acc_rs(acc_dv, p_frag, do_slot);
    issue_acc_rs(acc_dk, ds_frag, q_slot);
    wgmma_commit();
    issue_dq(acc_dq, dq_col0, buf);
    wgmma_commit();
  };
  // After issue_grads' groups completed: the slot is free again, and dQ goes to dq_accum.
  auto finish_grads = [&](DqAcc& acc_dq, int s, int m0) {
    fence_regs(acc_dq);
    fence_regs(acc_dk);
    fence_regs(acc_dv);
    fence_regs(p_frag);
    fence_regs(ds_frag);
    __syncwarp();
    if (lane == 0) mbar_arrive(&q_empty[s]);  // every wgmma that read the slot has completed
    add_dq(acc_dq, dq_col0, dq_cols_added, m0);
  };

  // Note [bwd pipeline] (BwdConfig): iteration it issues tile it-1's gradients and tile it's S^T / dP^T,
  // adds tile it-1's dQ while the latter run, then does tile it's softmax gradient. The first tile's
  // S^T / dP^T and the last tile's gradients are peeled off.
  mbar_wait(kv_full, 0);
  if constexpr (!C::template kPipelinedFor<Causal>) {
    // One tile at a time (d = 128: the two tiles' accumulators of the pipeline do not fit).
#pragma unroll 1
    for (int it = 0; it < m_tiles - m_first; ++it) {
      const int s = it % kStages;
      const int m0 = (m_first + it) * kBlockM;
      float s_acc[kBlockM / 2], dp_acc[kBlockM / 2], acc_dq[C::kDqN / 2];
      mbar_wait(&q_full[s], (it / kStages) & 1);
      wgmma_fence();
      issue_sdp(s_acc, dp_acc, s);
      softmax_grad(s_acc, dp_acc, s, m0, it & 1);
      wgmma_fence();
      issue_grads(acc_dq, s, it & 1);
      wgmma_wait<0>();
      finish_grads(acc_dq, s, m0);
    }
  } else {
    mbar_wait(&q_full[0], 0);
    {
      float s_acc[kBlockM / 2], dp_acc[kBlockM / 2];
      wgmma_fence();
      issue_sdp(s_acc, dp_acc, 0);
      softmax_grad(s_acc, dp_acc, 0, m_first * kBlockM, 0);
    }
    const int n_tiles = m_tiles - m_first;
#pragma unroll 1
    for (int it = 1; it < n_tiles; ++it) {
      const int s = it % kStages, s_prev = (it - 1) % kStages;
      const int m0 = (m_first + it) * kBlockM;
      float s_acc[kBlockM / 2], dp_acc[kBlockM / 2], acc_dq[C::kDqN / 2];
      mbar_wait(&q_full[s], (it / kStages) & 1);
      wgmma_fence();
      issue_grads(acc_dq, s_prev, (it - 1) & 1);
      issue_sdp(s_acc, dp_acc, s);
      wgmma_wait<2>();  // the gradients of tile it-1 are done; S^T / dP^T of tile it may still run
      finish_grads(acc_dq, s_prev, m0 - kBlockM);
      softmax_grad(s_acc, dp_acc, s, m0, it & 1);
    }
    {
      const int s_last = (n_tiles - 1) % kStages;
      float acc_dq[C::kDqN / 2];
      wgmma_fence();
      issue_grads(acc_dq, s_last, (n_tiles - 1) & 1);
      wgmma_wait<0>();
      finish_grads(acc_dq, s_last, (m_tiles - 1) * kBlockM);
    }
  }

  // Epilogue: dK = scale * dS^T Q, dV = P^T dO, rows of this thread's two keys.
  T* gdK = static_cast<T*>(p.dk) + b * p.dk_batch_stride + h * p.dk_head_stride;
  T* gdV = static_cast<T*>(p.dv) + b * p.dv_batch_stride + h * p.dv_head_stride;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = r ? key_b : key_a;
    if (key >= p.seqlen_k) continue;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      const int col = 8 * i + col_in_tile;
      *reinterpret_cast<uint32_t*>(gdK + key * p.dk_row_stride + col) =
          pack2<T>(acc_dk[4 * i + 2 * r] * p.scale, acc_dk[4 * i + 2 * r + 1] * p.scale);
      *reinterpret_cast<uint32_t*>(gdV + key * p.dv_row_stride + col) = pack2<T>(acc_dv[4 * i + 2 * r], acc_dv[4 * i + 2 * r + 1]);
    }
  }
}

}  // namespace lmscale::kernels::hopper
