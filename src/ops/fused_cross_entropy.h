// The bridge to the fused cross-entropy kernels (src/kernels/fused_cross_entropy.cu) and their ATen
// reference: the mean over all positions of −log softmax(logits)[target] (docs/spec.md §1), computed
// in fp32 from logits of any float dtype without forming the fp32 log-softmax of the batch.
#pragma once
#include <ATen/core/Tensor.h>

namespace lmscale::ops {

// Throws, naming the problem, unless logits (…, V) are non-empty and targets (…) int64 of the logits'
// shape without V. Shared with the torch.ops.lmscale.cross_entropy_* ops (fused_library.cpp).
void check_cross_entropy_shapes(const at::Tensor& logits, const at::Tensor& targets);

// Whether cross_entropy_mean runs the CUDA kernels (CUDA bf16/fp32 logits, int64 targets on the same
// device, kernels built); otherwise it runs cross_entropy_mean_reference.
bool cross_entropy_mean_uses_kernel(const at::Tensor& logits, const at::Tensor& targets);

// Differentiable in logits. logits (…, V), targets (…) int64 in [0, V): a 0-dim loss in fp32 (fp64
// for fp64 logits). The gradient has the logits' dtype. On the kernel path a target outside [0, V)
// gives a NaN loss instead of an error (checking it would stall the GPU stream).
at::Tensor cross_entropy_mean(const at::Tensor& logits, const at::Tensor& targets);

// log-softmax in at least fp32 and the mean negative log-likelihood with ATen ops: the CPU path and
// the tests' oracle (run in fp64).
at::Tensor cross_entropy_mean_reference(const at::Tensor& logits, const at::Tensor& targets);

}  // namespace lmscale::ops
