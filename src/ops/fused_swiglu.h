// The bridge to the fused SwiGLU gate kernels (src/kernels/fused_swiglu.cu) and their ATen
// reference: silu(a) · b, the elementwise part of SwiGLU between its GEMMs (docs/spec.md §1).
#pragma once
#include <ATen/core/Tensor.h>

namespace lmscale::ops {

// Whether silu_mul runs the CUDA kernels for these inputs (CUDA, one shape, one bf16/fp32 dtype, rows
// evenly strided with the last dim contiguous, kernels built); otherwise it runs silu_mul_reference.
bool silu_mul_uses_kernel(const at::Tensor& a, const at::Tensor& b);

// Differentiable in a and b. Same shape and dtype; the result is contiguous, in that dtype.
at::Tensor silu_mul(const at::Tensor& a, const at::Tensor& b);

// ATen's silu(a) · b (any device and float dtype): the CPU path and the tests' oracle (run in fp64).
at::Tensor silu_mul_reference(const at::Tensor& a, const at::Tensor& b);

}  // namespace lmscale::ops
