// Gradient clipping by the global L2 norm, as torch.nn.utils.clip_grad_norm_ does it: every gradient
// is scaled by min(1, max_norm / (norm + 1e-6)). On the device, with no host sync, so it can sit
// between backward and the optimizer step without stalling the stream.
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

namespace lmscale {

// Scales the defined gradients of `params` in place; returns the total norm before clipping (a 0-d
// fp32 tensor on the params' device; undefined when no param has a gradient). max_norm <= 0 only
// measures the norm.
at::Tensor clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm);

}  // namespace lmscale
