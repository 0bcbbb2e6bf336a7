// The bridge to the fused residual-add + RMSNorm kernels (src/kernels/fused_rmsnorm.cu) and their
// ATen reference. h = x + residual, y = RMSNorm(h) · gain (docs/spec.md §1, fp32 math), returned
// together so the residual stream and the normed input of the next sublayer come from one pass.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <utility>

#include "ops/fp8_amax.h"

namespace lmscale::ops {

// Whether add_rmsnorm runs the CUDA kernels for these inputs (CUDA, bf16/fp32 tensors of one device,
// fp32 gain, C ≤ kernels::kAddRmsNormMaxCols, y in bf16/fp32, kernels built); otherwise it runs
// add_rmsnorm_reference.
bool add_rmsnorm_uses_kernel(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& gain,
                             c10::ScalarType y_dtype);

// Differentiable in x, residual and gain. x (…, C); residual the same shape or undefined (then h is x
// itself, the very tensor); gain (C). h has the dtype of x + residual, y has y_dtype (the autocast
// dtype when a matmul reads it next, saving that cast).
// FP8 (ops/fp8_amax.h): given y_amax, y's amax is recorded there as y is written; given dresidual_amax,
// the backward records the amax of the residual's gradient as it writes it (the dY of the FP8 GEMM
// that produced the residual). The CPU path keeps the same contract with ATen ops.
std::pair<at::Tensor, at::Tensor> add_rmsnorm(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& gain,
                                              double eps, c10::ScalarType y_dtype, const Fp8AmaxSlot& y_amax = {},
                                              const Fp8AmaxSlot& dresidual_amax = {});

// The same with ATen ops on any device and float dtype (the norm in at least fp32): the CPU path and
// the tests' oracle (run in fp64).
std::pair<at::Tensor, at::Tensor> add_rmsnorm_reference(const at::Tensor& x, const at::Tensor& residual,
                                                        const at::Tensor& gain, double eps, c10::ScalarType y_dtype);

}  // namespace lmscale::ops
