// The one bridge to the fused SwiGLU gate kernels (src/kernels/fused_swiglu.cu) and their ATen
// reference: silu(a) · b, the elementwise part of SwiGLU between its GEMMs (docs/spec.md §1), for the
// C++ model (swiglu, differentiable) and torch.ops.lmscale.swiglu_{forward,backward} (fused_library.cpp).
#pragma once
#include <ATen/core/Tensor.h>

#include <tuple>

#include "ops/fp8_amax.h"

namespace lmscale::ops {

// Whether swiglu_forward/backward run the CUDA kernels for these inputs (CUDA, one shape, one bf16/fp32
// dtype, non-empty, kernels built); otherwise they run the reference (fp32 math, fp64 for fp64 inputs).
// Rows of a's and b's last dim evenly spaced in memory (a column block of a wider GEMM output) are read
// in place; other layouts are copied contiguous first.
bool swiglu_uses_kernel(const at::Tensor& a, const at::Tensor& b);

// out = silu(a) · b: a and b of one shape, dtype and device; out contiguous, in that dtype. Given
// out_amax (ops/fp8_amax.h), out's amax is recorded there as it is written (W2's input); under delayed
// scaling the kernel writes W2's FP8 operand instead (out is then handed on unwritten).
at::Tensor swiglu_forward(const at::Tensor& a, const at::Tensor& b, const Fp8AmaxSlot& out_amax = {});

// da = dout · b · σ(a) · (1 + a · (1 − σ(a))),  db = dout · silu(a), contiguous in a's dtype. Given
// da_amax / db_amax, the amax of a's / b's gradient (the dY of W1 / W3) is recorded there.
std::tuple<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& dout, const at::Tensor& a, const at::Tensor& b,
                                                   const Fp8AmaxSlot& da_amax = {}, const Fp8AmaxSlot& db_amax = {});

// Differentiable in a and b (the C++ model): swiglu_forward, with swiglu_backward as its gradient.
at::Tensor swiglu(const at::Tensor& a, const at::Tensor& b, const Fp8AmaxSlot& out_amax = {},
                  const Fp8AmaxSlot& da_amax = {}, const Fp8AmaxSlot& db_amax = {});

}  // namespace lmscale::ops
