// Where a Linear layer's weight-gradient GEMM writes when something other than autograd's .grad owns
// the gradients (a data-parallel communication buffer, distributed/distributed_optimizer.h): the
// GEMM writes straight into the destination, in its dtype (fp32, or bf16 rounded once by the GEMM
// itself), and autograd gets no gradient for the weight, so there is no .grad to allocate, copy or
// cast. model/ knows only this interface; whoever implements it decides where gradients live.
#pragma once
#include <ATen/core/Tensor.h>

namespace lmscale {

class WeightGradDestination {
 public:
  virtual ~WeightGradDestination() = default;
  // Where `weight`'s gradient of this backward goes: a tensor shaped like the weight (fp32 or
  // bf16, contiguous), overwritten by the GEMM; or an undefined tensor, and the gradient then goes
  // to autograd as it would without a destination.
  virtual at::Tensor slot(const at::Tensor& weight) = 0;
  // Called once `weight`'s gradient is in its slot (on the backward's stream, in stream order).
  virtual void written(const at::Tensor& weight) = 0;
};

}  // namespace lmscale
