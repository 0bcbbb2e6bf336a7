// Fused AdamW; see adamw.h.
#include "train/adamw.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "ops/fused_adamw.h"

namespace lmscale {

FusedAdamW::FusedAdamW(std::vector<at::Tensor> params, AdamWOptions options, bool use_kernel)
    : params_(std::move(params)), opt_(options), use_kernel_(use_kernel) {
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
  std::vector<at::Tensor> copies;
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].grad().defined()) copies.push_back(i < bf16_copies_.size() ? bf16_copies_[i] : at::Tensor());
  ran_kernel_ = use_kernel_ && ops::fused_adamw_accepts(p, g, m, v, copies);
  if (ran_kernel_) {
    // One device step counter for the whole list (torch keeps one per param; they differ only when
    // some param misses a gradient on some step, which the LM never does).
    if (!kernel_step_.defined()) kernel_step_ = at::zeros({}, p.front().options().dtype(at::kFloat));
    ops::fused_adamw_step(p, g, m, v, copies, kernel_step_,
                          {opt_.lr, opt_.beta1, opt_.beta2, opt_.eps, opt_.weight_decay});
    return;
  }
  // The fused kernel reads `step` but does not advance it (torch.optim advances it first, too).
  at::_foreach_add_(s, 1);
  at::_fused_adamw_(p, g, m, v, /*max_exp_avg_sqs=*/{}, s, opt_.lr, opt_.beta1, opt_.beta2, opt_.weight_decay,
                    opt_.eps, /*amsgrad=*/false, /*maximize=*/false);
}

void FusedAdamW::set_bf16_copies(std::vector<at::Tensor> copies) {
  TORCH_CHECK(copies.size() == params_.size(), "set_bf16_copies: got ", copies.size(), " copies for ",
              params_.size(), " params; pass one per param (an undefined tensor where none is wanted)");
  bf16_copies_ = std::move(copies);
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
  if (kernel_step_.defined()) b += kernel_step_.nbytes();
  return b;
}

}  // namespace lmscale
