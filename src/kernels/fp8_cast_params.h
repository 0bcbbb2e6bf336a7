// The boundary between ops/ and the FP8 cast kernels: plain params, no ATen, no CUDA headers.
// A cast is two launches on one stream, both capturable in a CUDA graph (no host sync):
//   run_fp8_amax  zeroes *amax_bits, then an atomic max of |x| over the tensor into it,
//   run_fp8_cast  s = fp8_scale_from_amax(amax) (fp8_scale.h) read on the device, then
//                 q = fp8(x·s) rounded to nearest even, row-major and/or transposed, and 1/s stored.
#pragma once
#include <cstdint>

#include "kernels/fp8_history_params.h"
#include "kernels/fp8_scale.h"
#include "kernels/fused_dtype.h"

namespace lmscale::kernels {

struct Fp8CastParams {
  const void* x = nullptr;  // (rows, cols) row-major, contiguous, bf16 or fp32 (dtype)
  int64_t rows = 0, cols = 0;
  FusedDtype dtype = FusedDtype::kBF16;
  Fp8Format format = Fp8Format::kE4M3;
  uint32_t* amax_bits = nullptr;  // abs_bits of max |x| (fp8_scale.h); amax writes it, cast reads it
  void* out = nullptr;            // (rows, cols) row-major FP8, or null
  void* out_t = nullptr;          // (cols, rows) row-major FP8 (xᵀ), or null
  float* inv_scale = nullptr;     // 1/s, the decode factor the scaled GEMM takes
};

// The cast needs rows and cols multiples of 16 (the FP8 GEMM's own rule) and 16-byte aligned
// pointers; the launchers throw std::runtime_error otherwise, and on a CUDA error.
void run_fp8_amax(const Fp8CastParams& params, void* stream);
void run_fp8_cast(const Fp8CastParams& params, void* stream);

// FP8 bytes (rows, cols) row-major to their transpose (cols, rows) row-major, byte for byte: the dW
// GEMM's operand for an operand written in FP8 by a kernel that cannot write the transpose itself
// (RMSNorm under delayed scaling). 1 B read + 1 B write per element. rows and cols multiples of 16,
// pointers 16-byte aligned; throws std::runtime_error otherwise and on a CUDA error.
void run_fp8_transpose(const void* fp8, void* fp8_t, int64_t rows, int64_t cols, void* stream);

// A weight the AdamW kernel wrote in FP8 under delayed scaling (fused_adamw_params.h), finished after
// its update: the transpose as above, the decode factor it was written with copied from `history` to
// *inv_scale (what the GEMMs read until the next update), and the history rolled for the next update.
void run_fp8_weight_finish(const void* fp8, void* fp8_t, int64_t rows, int64_t cols, Fp8History* history,
                           float* inv_scale, void* stream);

}  // namespace lmscale::kernels
