// The boundary between ops/ and the fused SwiGLU gate kernels: plain params, no ATen, no CUDA
// headers. SwiGLU (docs/spec.md §1) is W2(silu(W1 x) ⊙ W3 x); these kernels fuse the part between
// the GEMMs, per element with a = W1 x, b = W3 x, fp32 math, one rounding of each output:
//   forward   out = silu(a) · b,  silu(a) = a · σ(a)
//   backward  da = dout · b · σ(a) · (1 + a · (1 − σ(a))),   db = dout · silu(a)
// Inputs and outputs (rows, F), one dtype for all, last dim contiguous; a, b, da, db may have a
// row stride (column blocks of one wider GEMM operand); out and dout are contiguous.
// FP8 (issue 27): out is W2's input, da and db the dY of W1 and W3; given a slot, the kernel also
// takes max |·| of what it stores there, bit-identical to fp8_amax_kernel's pass (kernels/fp8_amax.cuh).
#pragma once
#include <cstdint>

#include "kernels/fused_dtype.h"

namespace lmscale::kernels {

struct SwiGluParams {
  const void* a = nullptr;  // (rows, F), row stride a_stride
  const void* b = nullptr;  // (rows, F), row stride b_stride
  int64_t a_stride = 0, b_stride = 0;
  void* out = nullptr;         // forward: (rows, F) contiguous
  const void* dout = nullptr;  // backward: (rows, F) contiguous
  void* da = nullptr;          // backward: (rows, F), row stride da_stride
  void* db = nullptr;          // backward: (rows, F), row stride db_stride
  int64_t da_stride = 0, db_stride = 0;
  // Or null: max |out| (forward), max |da|, max |db| (backward) as stored, float bits (fp8_scale.h);
  // zeroed by the launcher.
  uint32_t* out_amax = nullptr;
  uint32_t* da_amax = nullptr;
  uint32_t* db_amax = nullptr;
  int64_t rows = 0, cols = 0;
  FusedDtype dtype = FusedDtype::kBF16;
};

// Launch on `stream` (cudaStream_t as void*); throw std::runtime_error on a CUDA error.
void run_swiglu_fwd(const SwiGluParams& params, void* stream);
void run_swiglu_bwd(const SwiGluParams& params, void* stream);

}  // namespace lmscale::kernels
