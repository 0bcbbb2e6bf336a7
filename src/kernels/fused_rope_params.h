// The boundary between ops/ and the fused QKV-split + RoPE kernels: plain params, no ATen, no CUDA
// headers. Forward takes the one QKV GEMM's output, rows (B·T) of [q | k | v] (3C wide), and writes
// q and k rotated (interleaved pairs (2i, 2i+1) by angle t·θ^(−2i/D), docs/spec.md §1) and v as it
// is, all three in the attention layout (B, H, T, D), contiguous: one pass instead of a split, two
// upcasts, two complex multiplies, two downcasts and a copy of v. Backward is the transpose: dq and
// dk rotated back, dv copied, into the GEMM output's gradient (B·T, 3C), which is the QKV GEMM's dY:
// given a slot, the backward also takes its max |·| as stored (FP8, no own pass; kernels/fp8_amax.cuh),
// and under delayed scaling (fp8_history_params.h) writes it in FP8 itself, both layouts (run_rope_qkv_bwd_fp8).
#pragma once
#include <cstdint>

#include "kernels/fp8_history_params.h"

namespace lmscale::kernels {

enum class RopeDtype { kBF16 = 0, kFP32 = 1 };

struct RopeQkvParams {
  const void* qkv_in = nullptr;  // fwd input (B·T, 3C) with row stride qkv_row_stride, last dim contiguous
  void* qkv_grad = nullptr;      // bwd output, contiguous (B·T, 3C)
  const void* q = nullptr;       // bwd inputs dq, dk, dv: contiguous (B, H, T, D)
  const void* k = nullptr;
  const void* v = nullptr;
  void* q_out = nullptr;         // fwd outputs: contiguous (B, H, T, D)
  void* k_out = nullptr;
  void* v_out = nullptr;
  const float* rotation = nullptr;  // (≥T, D/2, 2) fp32 (cos, sin), position-major, contiguous
  uint32_t* qkv_grad_amax = nullptr;  // bwd, or null: max |qkv_grad| as stored, float bits (fp8_scale.h); zeroed by the launcher
  Fp8DelayedOut qkv_grad_fp8;       // bwd under delayed scaling: qkv_grad in FP8 (e5m2, the history's format)
  int64_t qkv_row_stride = 0;       // elements between rows of qkv_in (3C when dense)
  int batch = 0, seqlen = 0, heads = 0, head_dim = 0;  // head_dim even
  RopeDtype dtype = RopeDtype::kBF16;
};

// Launch on `stream` (cudaStream_t as void*); throw std::runtime_error on a CUDA error.
void run_rope_qkv_fwd(const RopeQkvParams& params, void* stream);
void run_rope_qkv_bwd(const RopeQkvParams& params, void* stream);

// Delayed scaling: the backward with qkv_grad written as FP8 bytes (qkv_grad_fp8: row-major and, with
// data_t, transposed), quantized with the history's scale, its amax into the history; qkv_grad (bf16)
// written too only when set. bf16, B·T a multiple of 16 and D of 8 (rope_qkv_fp8_ok); throws otherwise.
bool rope_qkv_fp8_ok(const RopeQkvParams& params);
void run_rope_qkv_bwd_fp8(const RopeQkvParams& params, void* stream);

}  // namespace lmscale::kernels
