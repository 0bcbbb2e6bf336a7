// The boundary between ops/ and the fused residual-add + RMSNorm kernels: plain params, no ATen, no
// CUDA headers. Per row of C elements (docs/spec.md §1, RMSNorm with gain g, fp32 math):
//   forward   h = x + residual (stored in x's dtype; residual absent: h is x, nothing stored)
//             rstd = 1 / sqrt(mean(h²) + eps)      (fp32, saved per row for the backward)
//             y = h · rstd · g                      (stored in y's dtype, e.g. the autocast bf16)
//   backward  u = g ⊙ dy;  dh = rstd · u − h · rstd³ · (Σ u·h) / C  (+ dh_in, h's gradient from its
//             other reader, the residual stream);  dx = dh;  dresidual = dh in the residual's dtype;
//             dg = Σ_rows dy ⊙ h · rstd
// One launch each way (the backward adds a small column sum of per-block partials of dg, so the sum
// is deterministic). All row-major tensors contiguous (rows, C).
// FP8 (saves a pass): y and the residual's gradient are FP8 GEMM operands (QKV or W1/W3 input; the dY of
// the output projection or W2); given a slot, each kernel also takes max |·| of what it stores there,
// bit-identical to fp8_amax_kernel's pass over the stored tensor (kernels/fp8_amax.cuh).
// Under delayed scaling (fp8_history_params.h) the forward writes y in FP8 itself (row-major; a row kernel
// cannot write the transpose coalesced, run_fp8_transpose does it from the FP8 bytes).
#pragma once
#include <cstdint>

#include "kernels/fp8_history_params.h"
#include "kernels/fused_dtype.h"

namespace lmscale::kernels {

// Largest C the kernels take: the backward keeps one fp32 dg partial per column in shared memory.
constexpr int kRmsNormMaxCols = 12288;

struct AddRmsNormFwdParams {
  const void* x = nullptr;         // (rows, C), x_dtype
  const void* residual = nullptr;  // (rows, C), residual_dtype, or null
  const float* gain = nullptr;     // (C)
  void* h_out = nullptr;           // (rows, C), x_dtype; needed when residual is given
  void* y_out = nullptr;           // (rows, C), y_dtype
  float* rstd_out = nullptr;       // (rows)
  uint32_t* y_amax = nullptr;      // or null: max |y| as stored, float bits (fp8_scale.h); zeroed by the launcher
  // Delayed scaling: y as FP8 bytes (y_fp8.data, row-major; data_t unused) with the history's scale, its
  // amax into the history (fp8_history_params.h). y_out may then be null. Needs bf16 y and C a multiple of 4.
  Fp8DelayedOut y_fp8;
  int64_t rows = 0;
  int cols = 0;
  float eps = 1e-5f;
  FusedDtype x_dtype = FusedDtype::kFP32, residual_dtype = FusedDtype::kFP32, y_dtype = FusedDtype::kFP32;
};

struct AddRmsNormBwdParams {
  const void* h = nullptr;      // (rows, C), h_dtype: the forward's h (x when there was no residual)
  const void* dy = nullptr;     // (rows, C), y_dtype
  const void* dh_in = nullptr;  // (rows, C), h_dtype, or null (no other reader of h)
  const float* gain = nullptr;  // (C)
  const float* rstd = nullptr;  // (rows), from the forward
  void* dx_out = nullptr;       // (rows, C), h_dtype
  void* dresidual_out = nullptr;  // (rows, C), residual_dtype, or null (then the caller uses dx)
  float* dgain_partial = nullptr;  // workspace (rms_norm_bwd_partial_rows(rows), C) fp32
  float* dgain_out = nullptr;      // (C)
  // Or null: max |residual's gradient| as stored (dresidual_out, or dx_out when that is null), float
  // bits (fp8_scale.h); zeroed by the launcher.
  uint32_t* dresidual_amax = nullptr;
  int64_t rows = 0;
  int cols = 0;
  FusedDtype h_dtype = FusedDtype::kFP32, residual_dtype = FusedDtype::kFP32, y_dtype = FusedDtype::kFP32;
};

// Rows of the backward's dg workspace: one per block of the backward launch (a few per SM of the
// current device), at most `rows`.
int64_t rms_norm_bwd_partial_rows(int64_t rows);

// Launch on `stream` (cudaStream_t as void*); throw std::runtime_error on a bad size or a CUDA error.
void run_rms_norm_fwd(const AddRmsNormFwdParams& params, void* stream);
void run_rms_norm_bwd(const AddRmsNormBwdParams& params, void* stream);

}  // namespace lmscale::kernels
