// Global-norm gradient clipping; see grad_clip.h.
#include "train/grad_clip.h"

#include <ATen/ATen.h>

namespace lmscale {

at::Tensor clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm) {
  std::vector<at::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return {};
  at::NoGradGuard no_grad;
  // The norm of the per-tensor norms is the norm of everything; fp32 whatever the gradients' dtype.
  std::vector<at::Tensor> norms = at::_foreach_norm(grads, 2);
  for (auto& n : norms) n = n.to(at::kFloat);
  const at::Tensor total = at::stack(norms).norm();
  if (max_norm > 0) {
    const at::Tensor coef = ((total + 1e-6).reciprocal() * max_norm).clamp_max(1.0);
    at::_foreach_mul_(grads, coef);
  }
  return total;
}

}  // namespace lmscale
