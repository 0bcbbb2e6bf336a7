// Fused AdamW; see adamw.h.
#include "train/adamw.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>

#include "ops/fused_adamw.h"

namespace lmscale {

FusedAdamW::FusedAdamW(std::vector<at::Tensor> params, AdamWOptions options, bool use_kernel)
    : params_(std::move(params)), opt_(options), use_kernel_(use_kernel) {
  TORCH_CHECK(opt_.lr >= 0 && opt_.eps >= 0 && opt_.beta1 >= 0 && opt_.beta1 < 1 && opt_.beta2 >= 0 &&
                  opt_.beta2 < 1 && opt_.weight_decay >= 0,
              "invalid AdamW options: need lr >= 0, eps >= 0, 0 <= betas < 1, weight_decay >= 0");
}

void FusedAdamW::ensure_state() {
  if (!exp_avg_.empty()) return;
  for (const auto& p : params_) {
    exp_avg_.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
    exp_avg_sq_.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
    // fp32 step counter on the parameter's device: stays there, so a CUDA graph can replay it.
    steps_.push_back(at::zeros({}, p.options().dtype(at::kFloat)));
  }
}

void FusedAdamW::update(const std::vector<size_t>& which, bool advance_kernel_step) {
  std::vector<at::Tensor> p, g, m, v, s, copies;
  for (size_t i : which) {
    const auto& grad = params_[i].grad();
    if (!grad.defined()) continue;
    p.push_back(params_[i]);
    g.push_back(grad);
    m.push_back(exp_avg_[i]);
    v.push_back(exp_avg_sq_[i]);
    s.push_back(steps_[i]);
    copies.push_back(i < bf16_copies_.size() ? bf16_copies_[i] : at::Tensor());
  }
  if (p.empty()) return;
  ran_kernel_ = use_kernel_ && ops::fused_adamw_accepts(p, g, m, v, copies);
  if (ran_kernel_) {
    // One device step counter for the whole list (torch keeps one per param; they differ only when
    // some param misses a gradient on some step, which the LM never does).
    if (!kernel_step_.defined()) kernel_step_ = at::zeros({}, p.front().options().dtype(at::kFloat));
    std::vector<at::Tensor> amax;
    std::vector<ops::AdamWFp8Out> fp8;  // delayed scaling, once the weight's history is seeded
    if (!derived_.empty())
      for (size_t i : which) {
        if (!params_[i].grad().defined()) continue;
        amax.push_back(amax_of_[i]);
        const int d = derived_of_[i];
        ops::AdamWFp8Out o;
        if (d >= 0 && derived_[d].history.defined() && *derived_[d].seeded) {
          const auto& ps = derived_[d].params;
          o = {derived_[d].history, derived_[d].fp8_rows[std::find(ps.begin(), ps.end(), i) - ps.begin()]};
        }
        fp8.push_back(o);
      }
    ops::fused_adamw_step(p, g, m, v, copies, amax, fp8, kernel_step_,
                          {opt_.lr, opt_.beta1, opt_.beta2, opt_.eps, opt_.weight_decay}, advance_kernel_step);
    finish_derived(which);
    return;
  }
  // The fused kernel reads `step` but does not advance it (torch.optim advances it first, too).
  at::_foreach_add_(s, 1);
  if (p.front().is_cpu()) {
    // On the CPU, torch.optim.AdamW's own op sequence: each op rounds an element the same wherever it
    // sits in its tensor, where ATen's fused CPU kernel rounds a tensor's vector body and scalar tail
    // differently (by an ulp), so a sharded update (distributed/distributed_optimizer.h) would not
    // reproduce the unsharded one bit for bit. A recorded function, so that profiles list AdamW by name.
    RECORD_FUNCTION("lmscale::adamw_cpu", std::vector<c10::IValue>());
    for (size_t k = 0; k < p.size(); ++k) {
      const double t = s[k].item<double>();
      const double bc1 = 1 - std::pow(opt_.beta1, t), bc2 = 1 - std::pow(opt_.beta2, t);
      p[k].mul_(1 - opt_.lr * opt_.weight_decay);
      m[k].mul_(opt_.beta1).add_(g[k], 1 - opt_.beta1);
      v[k].mul_(opt_.beta2).addcmul_(g[k], g[k], 1 - opt_.beta2);
      p[k].addcdiv_(m[k], (v[k].sqrt() / std::sqrt(bc2)).add_(opt_.eps), -opt_.lr / bc1);
    }
    return;
  }
  at::_fused_adamw_(p, g, m, v, /*max_exp_avg_sqs=*/{}, s, opt_.lr, opt_.beta1, opt_.beta2, opt_.weight_decay,
                    opt_.eps, /*amsgrad=*/false, /*maximize=*/false);
}

void FusedAdamW::step() {
  at::NoGradGuard no_grad;
  ensure_state();
  std::vector<size_t> all(params_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  start_derived();
  update(all, /*advance_kernel_step=*/true);
}

void FusedAdamW::begin_step() {
  at::NoGradGuard no_grad;
  ensure_state();
  kernel_step_advanced_ = false;
  start_derived();
}

void FusedAdamW::step_param(size_t i) { step_params({i}); }

void FusedAdamW::step_params(const std::vector<size_t>& indices) {
  for (size_t i : indices) TORCH_CHECK(i < params_.size(), "step_params: index ", i, " out of ", params_.size(), " params");
  at::NoGradGuard no_grad;
  ensure_state();
  update(indices, /*advance_kernel_step=*/!kernel_step_advanced_);
  if (ran_kernel_) kernel_step_advanced_ = true;
}

void FusedAdamW::set_lr(double lr) {
  TORCH_CHECK(lr >= 0, "AdamW learning rate must be >= 0, got ", lr);
  opt_.lr = lr;
}

void FusedAdamW::set_derived_weights(std::vector<DerivedWeights> derived, at::Tensor amax_buffer) {
  for (const auto& d : derived)
    TORCH_CHECK(d.amax.defined() && amax_buffer.defined() && d.amax.storage().is_alias_of(amax_buffer.storage()),
                "set_derived_weights: every amax slot must be a view of amax_buffer");
  amax_of_.assign(params_.size(), at::Tensor());
  derived_of_.assign(params_.size(), -1);
  for (size_t d = 0; d < derived.size(); ++d)
    for (size_t i : derived[d].params) {
      TORCH_CHECK(i < params_.size() && derived_of_[i] < 0, "set_derived_weights: param ", i,
                  " is out of range or in two entries");
      TORCH_CHECK(i < bf16_copies_.size() && bf16_copies_[i].defined(), "set_derived_weights: param ", i,
                  " has no bf16 copy: call set_bf16_copies first");
      derived_of_[i] = static_cast<int>(d);
      amax_of_[i] = derived[d].amax;
    }
  derived_ = std::move(derived);
  derived_amax_ = std::move(amax_buffer);
}

void FusedAdamW::start_derived() {
  derived_pending_.clear();
  if (derived_.empty()) return;
  derived_amax_.zero_();
  for (const auto& d : derived_) derived_pending_.push_back(d.params.size());
}

void FusedAdamW::finish_derived(const std::vector<size_t>& updated) {
  if (derived_.empty()) return;
  for (size_t i : updated) {
    const int d = derived_of_[i];
    if (d < 0 || !params_[i].grad().defined()) continue;
    if (--derived_pending_[d] == 0) derived_[d].refresh();
  }
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

int64_t FusedAdamW::step_count() const {
  if (kernel_step_.defined()) return static_cast<int64_t>(kernel_step_.item<float>());
  return steps_.empty() ? 0 : static_cast<int64_t>(steps_.front().item<float>());
}

void FusedAdamW::load_state(const std::vector<at::Tensor>& exp_avg, const std::vector<at::Tensor>& exp_avg_sq,
                            int64_t steps) {
  TORCH_CHECK(exp_avg.size() == params_.size() && exp_avg_sq.size() == params_.size(), "load_state: got ",
              exp_avg.size(), " and ", exp_avg_sq.size(), " moments for ", params_.size(), " params");
  at::NoGradGuard no_grad;
  ensure_state();
  for (size_t i = 0; i < params_.size(); ++i) {
    TORCH_CHECK(exp_avg[i].sizes() == params_[i].sizes() && exp_avg_sq[i].sizes() == params_[i].sizes(),
                "load_state: param ", i, " has shape ", params_[i].sizes(), ", its saved moments ", exp_avg[i].sizes(),
                " and ", exp_avg_sq[i].sizes());
    exp_avg_[i].copy_(exp_avg[i]);
    exp_avg_sq_[i].copy_(exp_avg_sq[i]);
    steps_[i].fill_(static_cast<double>(steps));
  }
  // The kernel path's one counter; update() makes it only when it is missing.
  if (use_kernel_ && !params_.empty())
    kernel_step_ = at::full({}, static_cast<double>(steps), params_.front().options().dtype(at::kFloat));
}

int64_t FusedAdamW::state_bytes() const {
  int64_t b = 0;
  for (size_t i = 0; i < exp_avg_.size(); ++i)
    b += exp_avg_[i].nbytes() + exp_avg_sq_[i].nbytes() + steps_[i].nbytes();
  if (kernel_step_.defined()) b += kernel_step_.nbytes();
  return b;
}

}  // namespace lmscale
