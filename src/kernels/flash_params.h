// The one boundary between ops/ and the FlashAttention-2 CUDA kernels: a plain params struct
// (pointers, element strides, sizes, scale, flags) and the run_flash_* entry points. No ATen, no CUDA
// headers: ops/ fills the struct from tensors, the .cu files read it. Layout everywhere: (B, H, N, D).
#pragma once
#include <cstdint>
#include <string>

namespace lmscale::kernels {

// kFP32: fp32 tensors, served by the fp32 SIMT kernels (flash_fp32.h), not the tensor-core ones.
enum class FlashDtype { kBF16 = 0, kFP16 = 1, kFP32 = 2 };

// The kernel path: which family runs a bf16/fp16 forward or backward. FlashParams::path is the one switch
// (ops/ fills it from ops::set_flash_path; fp32 tensors always run the fp32 kernels). kAuto takes the sm_90a
// wgmma/TMA kernels (src/kernels/hopper/) wherever they can run (device sm_90, head dim in HopperHeadDims,
// strides TMA can describe; the backward also needs dout so), forward and backward alike, and the mma.sync
// kernels otherwise; kMmaSync / kHopper force one (kHopper throws, naming the reason, where it cannot run).
enum class FlashPath { kAuto = 0, kMmaSync = 1, kHopper = 2 };

// Element strides (not bytes). The last dim (D) must be contiguous and every row start 16-byte aligned
// (the kernels move rows with 16-byte cp.async); ops/ checks this before filling the struct.
struct FlashParams {
  // Inputs, shape (B, H, Nq, D) for q/o/dout and (B, H, Nk, D) for k/v.
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;           // forward output, q's layout and dtype
  float* lse = nullptr;        // logsumexp L, fp32, contiguous (B, H, Nq); written by fwd, read by bwd
  const void* dout = nullptr;  // bwd: dO, layout of o
  void* dq = nullptr;          // bwd outputs in the input dtype: dq like q, dk/dv like k/v
  void* dk = nullptr;
  void* dv = nullptr;
  // Hopper forward (optional): one int32, any contents; the launch zeroes it on the stream. With it the blocks take
  // query tiles in order as each frees up (Note [persistent forward], flash_fwd_hopper.cuh); without it each block
  // takes a fixed share.
  int* fwd_tile_counter = nullptr;
  // bwd workspaces supplied by the caller (ops/ allocates them; kernels never allocate):
  float* dq_accum = nullptr;  // fp32 (B, H, Nq, D) contiguous, any contents (zeroed or first-stored, below)
  float* dsum = nullptr;      // fp32 (B, H, Nq) contiguous: D_i = rowsum(dO ⊙ O)
  // Deterministic backward (Hopper kernels only; nullptr: dQ partial sums are added in whatever order the
  // key blocks finish): int32 (B * H, ceil(Nq / 64)), zeroed by the caller. Key block n then adds into a
  // query tile only after blocks 0 .. n-1 have (Note [deterministic dQ], flash_bwd_hopper.cuh), so dQ is
  // bitwise the same on every run.
  int* dq_semaphore = nullptr;
  // Hopper backward, default (not deterministic) order (optional): int32 (B * H, ceil(Nq / 64), 2), any
  // contents (the preprocess zeroes it). With it (or with dq_semaphore) dq_accum is not zeroed: the first key
  // block to reach a query tile stores its partial dQ and the others add once that store has landed (Note
  // [dQ first store], flash_bwd_hopper.cuh). Without it the preprocess zeroes dq_accum and every block adds.
  int* dq_tile_ticket = nullptr;
  // Hopper backward with grouped K/V heads: each K/V head's group of query heads is split over group_split blocks
  // per key tile (flash_bwd_group_split says how many; 1: one block walks the whole group and writes dK, dV
  // itself). With a split, dkv_accum (fp32, zeroed by the caller) holds dK then dV of every K/V head, each
  // flash_kv_planes(p) x flash_kv_rows(p) x head_dim (flash_sequence.cuh), the blocks add their partial sums into it,
  // and a conversion writes dk (times the scale) and dv.
  int group_split = 1;
  float* dkv_accum = nullptr;

  int64_t q_batch_stride = 0, q_head_stride = 0, q_row_stride = 0;
  int64_t k_batch_stride = 0, k_head_stride = 0, k_row_stride = 0;
  int64_t v_batch_stride = 0, v_head_stride = 0, v_row_stride = 0;
  int64_t o_batch_stride = 0, o_head_stride = 0, o_row_stride = 0;      // o and dout share this layout
  int64_t do_batch_stride = 0, do_head_stride = 0, do_row_stride = 0;
  int64_t dq_batch_stride = 0, dq_head_stride = 0, dq_row_stride = 0;
  int64_t dk_batch_stride = 0, dk_head_stride = 0, dk_row_stride = 0;  // dk and dv share this layout
  int64_t dv_batch_stride = 0, dv_head_stride = 0, dv_row_stride = 0;

  int batch = 0, heads = 0, seqlen_q = 0, seqlen_k = 0, head_dim = 0;
  // Grouped-query attention: k/v (and dk/dv) have heads_k heads, each serving heads / heads_k consecutive query
  // heads (query head h reads K/V head h / (heads / heads_k)); 0 means heads_k == heads. The backward sums dK and
  // dV over each group inside the kernels.
  int heads_k = 0;
  float scale = 0.f;  // softmax scale, 1/sqrt(D) by default
  // The mask (docs/spec.md §3.6, FlashAttention's definition): query i of a sequence sees key j iff
  //     i + shift - window_left <= j <= i + shift + window_right,   shift = bottom_right ? len_k - len_q : 0,
  // a negative window side being unbounded. is_causal makes window_right 0, whatever it holds (SDPA's is_causal:
  // shift 0, the top-left diagonal; with bottom_right FlashAttention's causal). A query that sees no key gets O = 0,
  // L = +inf and no gradient. The kernels skip every tile outside the mask.
  bool is_causal = false;
  bool bottom_right = false;
  int window_left = -1, window_right = -1;
  // Packed variable-length batches (FlashAttention's varlen layout), when cu_seqlens_q is set: int32 (batch + 1)
  // offsets on the device, non-decreasing from 0. Sequence b holds rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of
  // q/o/dout/dq and [cu_seqlens_k[b], ...) of k/v/dk/dv, which are (total, H, D) with batch strides 0; seqlen_q and
  // seqlen_k are the longest sequence's lengths (they size the grid); lse, dsum and dq_accum are (heads, total_q)
  // (dq_accum: (heads, total_q, D)) with total_q their rows; dq_tile_ticket and dq_semaphore are (B * H,
  // ceil(seqlen_q / 64)) as for a dense batch of the longest sequence.
  const int* cu_seqlens_q = nullptr;
  const int* cu_seqlens_k = nullptr;
  int total_q = 0, total_k = 0;  // rows of q and of k (packed batches only)
  FlashDtype dtype = FlashDtype::kBF16;
  FlashPath path = FlashPath::kAuto;
};

// True when this build holds kernels for (dtype, head_dim); see LMSCALE_FA_HEADDIMS / _DTYPES.
bool flash_supported(FlashDtype dtype, int head_dim);
// The built set, e.g. "bf16/fp16 x head_dim {64, 128}; fp32 x head_dim {16, 32, 64, 80, 128}" (the fp32
// kernels always serve the whole list), for error messages.
std::string flash_supported_list();

// How many blocks per key tile share one K/V head's group of query heads in run_flash_bwd (FlashParams::group_split):
// 1 unless the Hopper backward runs `p` with grouped heads, where one block per K/V head and key tile would leave the
// GPU with too few, too long blocks (a causal tail); never more than 1 for a deterministic backward (dq_semaphore set:
// the dK, dV sums would be added in any order).
int flash_bwd_group_split(const FlashParams& p);

// True when run_flash_fwd writes every row of O and L for `p`, a packed batch's rows in no sequence (past the last
// offset) included (O = 0, L = +inf): the Hopper forward. Otherwise the caller fills O with zeros and L with +inf
// before the call.
bool flash_fwd_writes_every_row(const FlashParams& p);

// True when run_flash_bwd writes every row of dK and dV for `p`, a packed batch's key rows in no sequence (past the
// last offset) included (zeros): the Hopper backward. Otherwise the caller zeroes dK and dV before the call.
bool flash_bwd_writes_every_key_row(const FlashParams& p);

// Launch on `stream` (a cudaStream_t passed as void* so this header needs no CUDA include).
// Throw std::runtime_error (file, line, kernel) on an unsupported config or any CUDA error.
void run_flash_fwd(const FlashParams& params, void* stream);
void run_flash_bwd(const FlashParams& params, void* stream);

}  // namespace lmscale::kernels
