// The bridge to the fused SwiGLU gate kernels (src/kernels/fused_swiglu.cu) and their ATen
// reference: silu(a) · b, the elementwise part of SwiGLU between its GEMMs (docs/spec.md §1).
#pragma once
#include <ATen/core/Tensor.h>

#include "ops/fp8_amax.h"

namespace lmscale::ops {

// Whether silu_mul runs the CUDA kernels for these inputs (CUDA, one shape, one bf16/fp32 dtype, rows
// evenly strided with the last dim contiguous, kernels built); otherwise it runs silu_mul_reference.
bool silu_mul_uses_kernel(const at::Tensor& a, const at::Tensor& b);

// Differentiable in a and b. Same shape and dtype; the result is contiguous, in that dtype.
// FP8 (ops/fp8_amax.h): given out_amax, the result's amax is recorded there as it is written (W2's
// input); given da_amax / db_amax, the backward records the amax of a's / b's gradient (the dY of W1 /
// W3). The CPU path keeps the same contract with ATen ops.
at::Tensor silu_mul(const at::Tensor& a, const at::Tensor& b, const Fp8AmaxSlot& out_amax = {},
                    const Fp8AmaxSlot& da_amax = {}, const Fp8AmaxSlot& db_amax = {});

// ATen's silu(a) · b (any device and float dtype): the CPU path and the tests' oracle (run in fp64).
at::Tensor silu_mul_reference(const at::Tensor& a, const at::Tensor& b);

}  // namespace lmscale::ops
