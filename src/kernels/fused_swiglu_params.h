// The boundary between ops/ and the fused SwiGLU gate kernels: plain params, no ATen, no CUDA
// headers. SwiGLU (docs/spec.md §1) is W2(silu(W1 x) ⊙ W3 x); these kernels fuse the part between
// the GEMMs, per element with a = W1 x, b = W3 x, fp32 math, one rounding of each output:
//   forward   out = silu(a) · b,  silu(a) = a · σ(a)
//   backward  da = dout · b · σ(a) · (1 + a · (1 − σ(a))),   db = dout · silu(a)
// Inputs and outputs (rows, F), one dtype for all, last dim contiguous; a, b, da, db may have a
// row stride (column blocks of one wider GEMM operand); out and dout are contiguous.
// FP8 (saves a pass): out is W2's input, da and db the dY of W1 and W3; given a slot, the kernel also
// takes max |·| of what it stores there, bit-identical to fp8_amax_kernel's pass (kernels/fp8_amax.cuh).
// Under delayed scaling (fp8_history_params.h) the kernel writes those operands in FP8 itself, both layouts,
// with the scale of the step's history, instead of bf16 for a cast pass to read (run_swiglu_*_fp8).
#pragma once
#include <cstdint>

#include "kernels/fp8_history_params.h"
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
  // Delayed scaling: out (forward), da and db (backward) in FP8 (e4m3 out, e5m2 gradients: the
  // history's format). The bf16 out / da / db pointers may then be null (nothing else reads them).
  Fp8DelayedOut out_fp8, da_fp8, db_fp8;
  int64_t rows = 0, cols = 0;
  FusedDtype dtype = FusedDtype::kBF16;
};

// Launch on `stream` (cudaStream_t as void*); throw std::runtime_error on a CUDA error.
void run_swiglu_fwd(const SwiGluParams& params, void* stream);
void run_swiglu_bwd(const SwiGluParams& params, void* stream);

// Delayed scaling: the same math, each 64×64 tile of out (or of da and db) quantized with its history's
// scale and written row-major and, when data_t is set, transposed (the dW GEMM's operand), amax into
// the history. bf16 only. Whether these apply: swiglu_fp8_ok (rows and cols multiples of 16, strides
// multiples of 8, 16-byte aligned pointers); the launchers throw otherwise.
bool swiglu_fp8_ok(const SwiGluParams& params, bool backward);
void run_swiglu_fwd_fp8(const SwiGluParams& params, void* stream);
void run_swiglu_bwd_fp8(const SwiGluParams& params, void* stream);

}  // namespace lmscale::kernels
