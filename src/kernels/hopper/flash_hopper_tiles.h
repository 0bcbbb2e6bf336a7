// The shipped tile choices of the sm_90a FlashAttention kernels per head dim, as plain constexpr functions
// (no CUDA: tests/cpp/kernels/hopper/flash_hopper_tiles_test.cpp includes it), and static_asserts that every
// head dim of HopperHeadDims gets shapes the kernels can run. FwdShipped / BwdShipped are these choices
// (flash_hopper.cu static_asserts that they match).
#pragma once
#include "kernels/flash_head_dims.h"
#include "kernels/hopper/wgmma_widths.h"

namespace lmscale::kernels::hopper {

// ---- the choices

// Forward: FwdConfig<T, D, fwd_block_n(D), fwd_consumers(D), fwd_ping_pong(D), fwd_q_slots(D)> (flash_fwd_hopper.cuh).
// d = 64 spends as many MUFU cycles per tile as tensor-core cycles; d = 80 (seq 2048 in the 2.7B model) gains most from
// a third consumer group (192-row blocks) with 96-key tiles, the largest that fit 128 registers per thread without
// serialising the wgmmas (H100 sweeps: docs/flash_notes.md, Hopper v2 and v3). d = 64 takes the same three groups of
// 128-key tiles and d = 128 ping-pong: H200, probe, the variants timed in turn over four rounds
// (docs/results/runs/2026-12-04-f52b9fe-forward-tiles), against 176-key tiles with ping-pong at d = 64: causal
// 16k -7 %, 8k -6 %, 3072 -3 %, 4096 level, GQA 2 x 32q/4kv x 4096 -1.5 %, non-causal 2048 / 4096 / 16k -7 / -8 / -7 %,
// 4 x 25 x 512 non-causal +3 % (1 us); against two groups without ping-pong at d = 128: causal 4096 / 8k / 16k -3.5 /
// -2 / -1 %, GQA 1 x 32q/8kv x 8192 -1.5 %, non-causal 2048 / 4096 -3 / -1 %, 16k level. In each pair the difference
// is the sustained one (the later rounds, clocks under the power cap); the first round's was smaller.
constexpr int fwd_block_n(int d) { return d == 80 ? 96 : 128; }  // keys per K/V tile
constexpr int fwd_consumers(int d) { return d == 128 ? 2 : 3; }  // 64 query rows each
constexpr bool fwd_ping_pong(int d) { return d == 128; }         // Note [ping-pong]
constexpr int fwd_block_m(int d) { return 64 * fwd_consumers(d); }  // queries per block
// Two Q slots (the next query tile's Q loads while the last one runs, Note [persistent forward]) at every head dim:
// H200, docs/results/runs/2026-12-02-b6aacbf-attention-probe, against one slot in the same call: GQA 2 x 32q/4kv x
// 4096 x 64 -7 %, 16 packed documents -9 % (d 64) / -4 % (d 128), the xl step -10 %, 2048 x 80 -3.5 %, GQA 8k x
// 128 -1 %, 16k x 128 -1 %; 16k x 64 +1.4 % there (within that run's drift), -3 % in the next call's
// (2026-12-03-ac66b1e-attention-q2). d = 128 keeps two K/V stages beside them.
constexpr int fwd_q_slots(int) { return 2; }
// Short causal calls at d = 64 (key sequences of at most kFwdShortKeys: the training steps' context; for a packed
// batch, its mean sequence, since one long document need not make the rest long) take two ping-pong groups of 64 rows
// instead (FwdShort): their query tiles walk a few key tiles, so what a tile costs beyond its key tiles and the
// overshoot of the diagonal decide. H200, probe, against the three groups (2026-12-04-f52b9fe-forward-tiles): the xl
// step (4 x 25 x 512) -24 %, 8 x 16 x 1024 -19 %, 4 x 16 x 2048 -4 %, 16 / 64 packed documents in 16k -6 / -15 %.
// (d = 128's shipped tile is the same two ping-pong groups at every length.)
constexpr int kFwdShortKeys = 2048;
constexpr bool fwd_has_short_tile(int d) { return d == 64; }
constexpr int fwd_short_block_n(int) { return 128; }
constexpr int fwd_short_consumers(int) { return 2; }  // with ping-pong, which needs exactly two
constexpr bool fwd_takes_short_tile(int d, bool causal, int keys_per_sequence) {
  return fwd_has_short_tile(d) && causal && keys_per_sequence <= kFwdShortKeys;
}

// Backward: BwdConfig<T, D, bwd_block_m(D)> (flash_bwd_hopper.cuh), queries per tile. Measured on an H100
// (docs/flash_notes.md, backward v5): 128-query tiles at d = 64, where S^T / dP^T of 64 x 64 would be bound
// by shared-memory reads; 64 at d = 80 / 128, where 128 would not fit the registers beside dK and dV.
constexpr int bwd_block_m(int d) { return d == 64 ? 128 : 64; }
// Note [K in registers] (flash_bwd_hopper.cuh): k-steps of S^T = K Q^T with K in registers. d = 128 holds 5 of
// its 8, the most that fit beside dK and dV without ptxas serialising the wgmmas; measured on an H100
// (docs/flash_notes.md, backward v5.3; results/runs/2026-11-26-12c518e-attention-v5.3): the main kernel -1.4 % at ncu's fixed
// clocks at 16k x 128 causal, the sustained backward -0.8, 0.0 and -0.3 % in three calls, 8k x 128 level; 4
// k-steps were level. d = 64 / 80 keep K in shared memory (their 64-byte swizzle would need its own fragment
// addressing; not measured).
constexpr int bwd_k_reg_steps(int d) { return d == 128 ? 5 : 0; }

// ---- the rules a choice must keep (each one a predicate, so the CPU test can show it rejects a bad tile)

// Shared memory one block may fill on sm_90: 227 KB, less 2 KB for the barriers and the alignment slack.
constexpr int kSmemBudget = 227 * 1024 - 2048;

// Columns of a d-wide tile in shared memory: d itself with the 128-byte swizzle (d % 64 == 0), else padded to
// the 64-byte swizzle's 32-column chunks (80 -> 96; TMA zero-fills the padding).
constexpr int padded_head_dim(int d) { return d % 64 == 0 ? d : (d + 31) / 32 * 32; }

// The forward keeps its Q slots and at least two stages of K and V (double buffering) in shared memory (2-byte
// elements).
constexpr bool fwd_fits_smem(int d, int block_n, int consumers, int q_slots) {
  return q_slots * 64 * consumers * padded_head_dim(d) * 2 + 2 * 2 * block_n * padded_head_dim(d) * 2 <= kSmemBudget;
}

// Ping-pong alternates exactly two consumer groups; FwdConfig drops it silently for any other count.
constexpr bool fwd_ping_pong_valid(int consumers, bool ping_pong) { return !ping_pong || consumers == 2; }

// The backward's query tiles are one or two wgmma M's of the dQ GEMM (Note [dQ split]).
constexpr bool bwd_block_m_valid(int block_m) { return block_m == 64 || block_m == 128; }
// A multiple of every valid query tile: the preprocess zeroes a packed sequence's dQ rows from (len / this) * this on,
// which holds its last partial tile whatever the tile (Note [dQ first store], flash_bwd_hopper.cuh).
constexpr int kBwdBlockMMultiple = 128;

// ---- the checks, for every head dim the Hopper kernels are instantiated for

template <int D>
struct HopperTileCheck {
  static_assert(D % 16 == 0 && D <= 256, "the Hopper head dims are multiples of 16 up to 256 (wgmma k and N)");
  static_assert(wgmma_width_generated(D), "O += P V, dV += P^T dO and dK += dS^T Q use a wgmma of N = D: add D to NS "
                                          "in src/kernels/hopper/generate_wgmma.py and run it");
  static_assert(fwd_block_n(D) % 16 == 0 && fwd_block_n(D) <= 256, "fwd_block_n: wgmma N, and 16-key steps of P V");
  static_assert(wgmma_width_generated(fwd_block_n(D)), "S = Q K^T uses a wgmma of N = fwd_block_n(D): add it to NS "
                                                       "in src/kernels/hopper/generate_wgmma.py and run it");
  static_assert(fwd_consumers(D) >= 1 && fwd_consumers(D) <= 3, "one producer and 1-3 consumer warpgroups");
  static_assert(fwd_ping_pong_valid(fwd_consumers(D), fwd_ping_pong(D)), "fwd_ping_pong needs two consumers");
  static_assert(fwd_q_slots(D) == 1 || fwd_q_slots(D) == 2, "fwd_q_slots: one or two Q tiles in shared memory");
  static_assert(fwd_fits_smem(D, fwd_block_n(D), fwd_consumers(D), fwd_q_slots(D)),
                "forward: the Q slots and two K/V stages exceed 225 KB");
  static_assert(bwd_block_m_valid(bwd_block_m(D)), "bwd_block_m: 64 or 128 queries per tile");
  static_assert(wgmma_width_generated(bwd_block_m(D)), "S^T = K Q^T uses a wgmma of N = bwd_block_m(D): add it to NS "
                                                       "in src/kernels/hopper/generate_wgmma.py and run it");
  static constexpr bool kChecked = true;
};

template <int... Ds>
constexpr bool hopper_tiles_checked(HeadDimList<Ds...>) {
  return (HopperTileCheck<Ds>::kChecked && ... && true);
}
static_assert(hopper_tiles_checked(HopperHeadDims{}), "every Hopper head dim has a valid tile choice");

}  // namespace lmscale::kernels::hopper
