// Fused AdamW; see adamw.h.
#include "train/adamw.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

namespace lmscale {

FusedAdamW::FusedAdamW(std::vector<at::Tensor> params, AdamWOptions options)
    : params_(std::move(params)), opt_(options) {
  TORCH_CHECK(opt_.lr >= 0 && opt_.eps >= 0 && opt_.beta1 >= 0 && opt_.beta1 < 1 && opt_.beta2 >= 0 &&
                  opt_.beta2 < 1 && opt_.weight_decay >= 0,
              "invalid AdamW options: need lr >= 0, eps >= 0, 0 <= betas < 1, weight_decay >= 0");
}

void FusedAdamW::step() {
  at::NoGradGuard no_grad;
  if (exp_avg_.empty()) {
    for (const auto& p : params_) {
      exp_avg_.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
      exp_avg_sq_.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
      // fp32 step counter on the parameter's device: stays there, so a CUDA graph can replay it.
      steps_.push_back(at::zeros({}, p.options().dtype(at::kFloat)));
    }
  }
  std::vector<at::Tensor> p, g, m, v, s;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& grad = params_[i].grad();
    if (!grad.defined()) continue;
    p.push_back(params_[i]);
    g.push_back(grad);
    m.push_back(exp_avg_[i]);
    v.push_back(exp_avg_sq_[i]);
    s.push_back(steps_[i]);
  }
  if (p.empty()) return;
  // The fused kernel reads `step` but does not advance it (torch.optim advances it first, too).
  at::_foreach_add_(s, 1);
  at::_fused_adamw_(p, g, m, v, /*max_exp_avg_sqs=*/{}, s, opt_.lr, opt_.beta1, opt_.beta2, opt_.weight_decay,
                    opt_.eps, /*amsgrad=*/false, /*maximize=*/false);
}

void FusedAdamW::zero_grad(bool set_to_none) {
  for (auto& p : params_) {
    if (set_to_none) {
      p.mutable_grad() = at::Tensor();
    } else if (p.grad().defined()) {
      p.mutable_grad().zero_();
    }
  }
}

int64_t FusedAdamW::state_bytes() const {
  int64_t b = 0;
  for (size_t i = 0; i < exp_avg_.size(); ++i)
    b += exp_avg_[i].nbytes() + exp_avg_sq_[i].nbytes() + steps_[i].nbytes();
  return b;
}

}  // namespace lmscale
