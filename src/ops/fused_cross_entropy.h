// The one bridge to the fused cross-entropy kernels (src/kernels/fused_cross_entropy.cu) and their ATen
// reference, for the C++ model (cross_entropy, differentiable: the mean over all positions of
// −log softmax(logits)[target], docs/spec.md §1) and torch.ops.lmscale.cross_entropy_{forward,backward}
// (fused_library.cpp). The loss in fp32 from logits of any float dtype, without forming the fp32
// log-softmax of the batch.
#pragma once
#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace lmscale::ops {

// PyTorch's at::Reduction values, as the schema takes them.
enum CrossEntropyReduction : int64_t { kReductionNone = 0, kReductionMean = 1, kReductionSum = 2 };

// Whether cross_entropy_forward/backward run the CUDA kernels (CUDA bf16/fp32 logits, targets on the
// same device, kernels built); otherwise they run the reference.
bool cross_entropy_uses_kernel(const at::Tensor& logits, const at::Tensor& targets);

// F.cross_entropy with class-index targets: per row of logits (…, V): m = max, l = log Σ exp(z − m),
// loss = l − (z_t − m); with label smoothing ε, (1 − ε)·that + ε·(l − (mean_j z_j − m)); a row whose
// target is ignore_index has loss 0 and gradient 0 (none: every row counts, and the mean needs no count
// of the rows). Returns (loss, stats): loss reduced as `reduction` says (none: the targets' shape; mean:
// over the rows counted, NaN when there are none, as PyTorch), fp32 (fp64 for fp64 logits); stats
// (2, rows) = (m, l) for the backward. On the kernel path a target outside [0, V) gives a NaN loss
// instead of an error (checking it would stall the GPU stream).
std::tuple<at::Tensor, at::Tensor> cross_entropy_forward(const at::Tensor& logits, const at::Tensor& targets,
                                                         int64_t reduction, std::optional<int64_t> ignore_index,
                                                         double label_smoothing);

// dz = g_row · (exp(z − m − l) − (1 − ε)·[j = t] − ε/V), 0 on ignored rows, in the logits' dtype and
// shape; g_row = grad_loss (sum), grad_loss / rows counted (mean), or grad_loss's entry for the row (none).
at::Tensor cross_entropy_backward(const at::Tensor& grad_loss, const at::Tensor& logits, const at::Tensor& targets,
                                  const at::Tensor& stats, int64_t reduction, std::optional<int64_t> ignore_index,
                                  double label_smoothing);

// Differentiable in logits (the C++ model's loss): the mean over every position, a 0-dim fp32 loss
// (fp64 for fp64 logits); targets (…) int64 in [0, V). The gradient has the logits' dtype.
at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets);

}  // namespace lmscale::ops
