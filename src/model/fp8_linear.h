// The FP8 Linear of `--precision fp8`: y = x · Wᵀ with all three GEMMs of the layer (forward, input
// gradient, weight gradient) in FP8 on the H100's tensor cores, per-tensor scales computed on the GPU
// (dynamic: ops/fp8_quantize.h; delayed: the operand's producer wrote it in FP8 with its history's scale,
// ops/fp8_history.h, and hands it over through the Fp8Amax slot), master weights and gradients in fp32.
// Which layers use it is the training step's choice (StepSetup::Fp8Layers); see
// docs/training_step_notes.md (FP8) for the measurements behind the defaults.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/core/TensorBody.h>

#include <functional>
#include <memory>
#include <vector>

#include "ops/fp8_amax.h"
#include "ops/fp8_quantize.h"

namespace lmscale {

// x (..., K) · sourceᵀ → (..., N) in bf16, differentiable in x and in `weights`. `source` (N, K) is
// the bf16 copy of the row-stacked fp32 `weights` (one Linear's weight, or q/k/v packed), or those
// weights themselves (fp32); it gets no gradient. Formats and why:
//   forward  Y  = X(e4m3) · W(e4m3)ᵀ,  fast accumulation, bf16 out
//   backward dX = dY(e5m2) · W(e4m3),   dW = dY(e5m2)ᵀ · X(e4m3), full accumulation, dW in fp32
// Gradients are e5m2: one scale covers the whole dY, whose values span more binades than
// activations do (e5m2 has 15 more, at one mantissa bit less). The transposed FP8 copies the
// backward GEMMs need (Xᵀ, Wᵀ, dYᵀ) are written by the same kernel pass as the row-major ones, and X
// is saved in FP8 (1 byte per element, where the bf16 path saves 2).
// Needs tokens (the product of x's leading dims), K and N multiples of 16 on CUDA (fp8_linear_ok).
// `cached`, when given, is `source` already quantized (e4m3, both layouts: the FP8 weights the
// optimizer keeps current, TransformerLM::attach_fp8_weights); the forward then casts only x.
// `quantized_x`, when given, is x already quantized by quantize_fp8_input: two layers that read the same
// input (SwiGLU's W1 and W3) share one amax and one cast of it.
// `dy_amax`, when given, is the slot in which the kernel that writes this layer's output gradient
// records its amax (ops/fp8_amax.h: RMSNorm's, SwiGLU's or RoPE's backward); the backward then casts
// dY without an amax pass of its own (and takes one when the slot holds no amax of that very dY).
at::Tensor linear_fp8(const at::Tensor& x, const at::Tensor& source, at::TensorList weights,
                      const ops::Fp8Tensor* cached = nullptr, const ops::Fp8Tensor* quantized_x = nullptr,
                      const ops::Fp8AmaxSlot& dy_amax = {});

// x as linear_fp8 quantizes it (e4m3, per-tensor scale; with the transposed copy the backward's dW needs
// when gradients are on), for passing to several linear_fp8 calls on the same x. With `x_amax` holding
// x's amax (recorded by the kernel that wrote x, ops/fp8_amax.h), only the cast runs.
ops::Fp8Tensor quantize_fp8_input(const at::Tensor& x, const ops::Fp8AmaxSlot& x_amax = {});

// Whether x can go through linear_fp8 with a weight of `out_features` rows.
bool fp8_linear_ok(const at::Tensor& x, int64_t out_features);

// Weights derived from parameters that the optimizer refreshes after updating them: the cached FP8
// weights. The AdamW kernel writes max |bf16 copy| of every param in `params` (indices into the
// model's parameters()) into `amax` (int32, one element; zeroed by the optimizer when a step starts),
// and once all of `params` are updated in a step `refresh()` runs, on the stream that updated the
// last of them (FusedAdamW::set_derived_weights).
// Delayed scaling (Fp8Scaling::kDelayed): `history` is the weight's amax history and fp8_rows[k] the rows
// of the row-major FP8 weight that params[k] fills. Until *seeded, refresh() casts as above and seeds the
// history; then the AdamW kernel writes fp8_rows itself with the history's scale (its amax into the
// history) and refresh() only finishes the weight (ops::fp8_weight_finish: the transpose, the decode
// factor it was written with, the history's roll). Undefined history: dynamic scaling.
struct DerivedWeights {
  std::vector<size_t> params;
  at::Tensor amax;
  std::function<void()> refresh;
  at::Tensor history;
  std::vector<at::Tensor> fp8_rows;
  std::shared_ptr<bool> seeded;
};

}  // namespace lmscale
