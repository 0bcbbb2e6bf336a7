// The one bridge to the fused residual-add + RMSNorm kernels (src/kernels/fused_rmsnorm.cu) and their
// ATen reference, for the C++ model (rms_norm, differentiable) and torch.ops.lmscale.rms_norm_{forward,
// backward} (fused_library.cpp). h = x + residual, y = RMSNorm(h) · weight (docs/spec.md §1, fp32 math),
// from one pass, so the residual stream and the normed input of the next sublayer come together.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <tuple>
#include <utility>

#include "ops/fp8_amax.h"

namespace lmscale::ops {

// Whether rms_norm_forward runs the CUDA kernel for these inputs (CUDA, bf16/fp32 x and residual on one
// device, fp32 weight, C ≤ kernels::kRmsNormMaxCols, y in bf16/fp32, non-empty, kernels built);
// otherwise it runs the reference (fp32 math, fp64 for fp64 inputs). An undefined residual is none.
bool rms_norm_uses_kernel(const at::Tensor& x, const std::optional<at::Tensor>& residual, const at::Tensor& weight,
                          c10::ScalarType y_dtype);

// x (…, C); residual x's shape, no wider than x, or none; weight (C). Returns (h, y, rstd): h = x + residual
// in x's dtype (an empty tensor without residual: h is x, which the caller keeps), rstd = 1/sqrt(mean(h²) +
// eps) per row (fp32, fp64 for fp64), y = h · rstd · weight in y_dtype (default x's; the autocast dtype
// when a matmul reads y next, saving that cast). Given y_amax (ops/fp8_amax.h), y's amax is recorded there
// as y is written; under delayed scaling the kernel writes the GEMM's FP8 operand instead (y is then
// handed on unwritten).
std::tuple<at::Tensor, at::Tensor, at::Tensor> rms_norm_forward(const at::Tensor& x,
                                                                const std::optional<at::Tensor>& residual,
                                                                const at::Tensor& weight, double eps,
                                                                std::optional<c10::ScalarType> y_dtype = std::nullopt,
                                                                const Fp8AmaxSlot& y_amax = {});

// dh = rstd·(w ⊙ dy) − h·rstd³·Σ(w ⊙ dy ⊙ h)/C (+ dh_in, h's gradient from its other reader); returns
// (dx, dweight, dresidual): dx = dh (the residual's gradient too), dweight = Σ_rows dy ⊙ h·rstd; with a
// residual_dtype other than h's, dresidual is dx in that dtype, written by the same pass (the residual is
// the narrower sublayer output under autocast: a separate cast would be one more kernel per block);
// otherwise it is empty. Given dresidual_amax, the amax of the residual's gradient (dresidual, or dx when
// that is empty: the dY of the FP8 GEMM that produced the residual) is recorded there.
std::tuple<at::Tensor, at::Tensor, at::Tensor> rms_norm_backward(const at::Tensor& dy,
                                                                 const std::optional<at::Tensor>& dh,
                                                                 const at::Tensor& h, const at::Tensor& weight,
                                                                 const at::Tensor& rstd,
                                                                 std::optional<c10::ScalarType> residual_dtype,
                                                                 const Fp8AmaxSlot& dresidual_amax = {});

// Differentiable in x, residual and weight (the C++ model): returns (h, y) with h = x itself, the very
// tensor, when residual is undefined. rms_norm_forward, with rms_norm_backward as its gradient.
std::pair<at::Tensor, at::Tensor> rms_norm(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                                           double eps, c10::ScalarType y_dtype, const Fp8AmaxSlot& y_amax = {},
                                           const Fp8AmaxSlot& dresidual_amax = {});

}  // namespace lmscale::ops
