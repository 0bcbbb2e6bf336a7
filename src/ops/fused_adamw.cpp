// Bridge to the multi-tensor AdamW kernel; see fused_adamw.h.
#include "ops/fused_adamw.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <string>

#include "ops/fp8_history.h"

#ifdef LMSCALE_HAS_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/fused_adamw_params.h"
#endif

namespace lmscale::ops {

bool fused_adamw_available() {
#ifdef LMSCALE_HAS_KERNELS
  return true;
#else
  return false;
#endif
}

bool fused_adamw_accepts(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                         const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                         const std::vector<at::Tensor>& bf16_copies, std::string* why) {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  const size_t n = params.size();
  if (grads.size() != n || exp_avgs.size() != n || exp_avg_sqs.size() != n || bf16_copies.size() != n)
    return no("the lists of params, grads, moments and bf16 copies differ in length");
  if (!fused_adamw_available()) return no("this build has no CUDA kernels");
  for (size_t i = 0; i < n; ++i) {
    const auto& p = params[i];
    if (!p.is_cuda()) return no("param " + std::to_string(i) + " is not on a CUDA device");
    if (p.device() != params[0].device()) return no("the params live on more than one device");
    for (const auto* t : {&p, &grads[i], &exp_avgs[i], &exp_avg_sqs[i]}) {
      if (!t->defined() || t->scalar_type() != at::kFloat || !t->is_contiguous() || t->device() != p.device() ||
          t->numel() != p.numel())
        return no("param " + std::to_string(i) + ": param, grad and moments must be contiguous fp32 of one size "
                  "on one device");
    }
    const auto& c = bf16_copies[i];
    if (c.defined() && (c.scalar_type() != at::kBFloat16 || !c.is_contiguous() || c.device() != p.device() ||
                        c.numel() != p.numel()))
      return no("bf16 copy " + std::to_string(i) + " must be contiguous bf16 of the param's size and device");
  }
  return true;
}

void fused_adamw_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                      const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                      const std::vector<at::Tensor>& bf16_copies, const at::Tensor& step,
                      const AdamWHyperparams& hyper, bool advance_step) {
  fused_adamw_step(params, grads, exp_avgs, exp_avg_sqs, bf16_copies, {}, step, hyper, advance_step);
}

void fused_adamw_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                      const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                      const std::vector<at::Tensor>& bf16_copies, const std::vector<at::Tensor>& amax_slots,
                      const at::Tensor& step, const AdamWHyperparams& hyper, bool advance_step) {
  fused_adamw_step(params, grads, exp_avgs, exp_avg_sqs, bf16_copies, amax_slots, {}, step, hyper, advance_step);
}

void fused_adamw_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                      const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                      const std::vector<at::Tensor>& bf16_copies, const std::vector<at::Tensor>& amax_slots,
                      const std::vector<AdamWFp8Out>& fp8_out, const at::Tensor& step, const AdamWHyperparams& hyper,
                      bool advance_step) {
  TORCH_CHECK(fp8_out.empty() || fp8_out.size() == params.size(), "fused_adamw_step: ", fp8_out.size(),
              " FP8 outputs for ", params.size(), " params: pass one per param (undefined where none) or none");
  for (size_t i = 0; i < fp8_out.size(); ++i)
    TORCH_CHECK(!fp8_out[i].history.defined() ||
                    (bf16_copies[i].defined() && fp8_out[i].rows.is_contiguous() &&
                     fp8_out[i].rows.numel() == params[i].numel() && fp8_out[i].rows.element_size() == 1 &&
                     fp8_out[i].rows.device() == params[i].device()),
                "fused_adamw_step: FP8 output ", i, " must be contiguous FP8 of the param's numel, beside a bf16 copy");
  TORCH_CHECK(amax_slots.empty() || amax_slots.size() == params.size(), "fused_adamw_step: ", amax_slots.size(),
              " amax slots for ", params.size(), " params: pass one per param (undefined where none) or none");
  std::string why;
  TORCH_CHECK(fused_adamw_accepts(params, grads, exp_avgs, exp_avg_sqs, bf16_copies, &why),
              "fused_adamw_step: ", why, "; use lmscale::FusedAdamW, which falls back to ATen's AdamW");
  for (size_t i = 0; i < amax_slots.size(); ++i)
    TORCH_CHECK(!amax_slots[i].defined() || (amax_slots[i].scalar_type() == at::kInt && amax_slots[i].numel() == 1 &&
                                             bf16_copies[i].defined() && amax_slots[i].device() == params[i].device()),
                "fused_adamw_step: amax slot ", i, " must be one int32 on the param's device, beside a bf16 copy");
  if (params.empty()) return;
  TORCH_CHECK(step.defined() && step.scalar_type() == at::kFloat && step.numel() == 1 &&
                  step.device() == params[0].device(),
              "fused_adamw_step: the step counter must be one fp32 element on the params' device");
#ifdef LMSCALE_HAS_KERNELS
  c10::cuda::CUDAGuard guard(params[0].device());
  void* stream = at::cuda::getCurrentCUDAStream().stream();
  kernels::AdamWHyper h;
  h.lr = static_cast<float>(hyper.lr);
  h.beta1 = static_cast<float>(hyper.beta1);
  h.beta2 = static_cast<float>(hyper.beta2);
  h.eps = static_cast<float>(hyper.eps);
  h.weight_decay = static_cast<float>(hyper.weight_decay);
  h.step = step.data_ptr<float>();
  if (advance_step) kernels::run_adamw_step_increment(h.step, stream);
  kernels::AdamWTensorList list;
  auto flush = [&] {
    if (list.count) kernels::run_adamw_update(list, h, stream);
    list = kernels::AdamWTensorList{};
  };
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].numel() == 0) continue;
    const int k = list.count++;
    list.param[k] = params[i].data_ptr<float>();
    list.grad[k] = grads[i].data_ptr<float>();
    list.exp_avg[k] = exp_avgs[i].data_ptr<float>();
    list.exp_avg_sq[k] = exp_avg_sqs[i].data_ptr<float>();
    list.param_bf16[k] = bf16_copies[i].defined() ? bf16_copies[i].data_ptr() : nullptr;
    list.amax_bits[k] = i < amax_slots.size() && amax_slots[i].defined()
                            ? reinterpret_cast<unsigned*>(amax_slots[i].data_ptr<int32_t>())
                            : nullptr;
    if (i < fp8_out.size() && fp8_out[i].history.defined()) {
      list.fp8_history[k] = fp8_history_ptr(fp8_out[i].history);
      list.param_fp8[k] = fp8_out[i].rows.data_ptr();
    }
    list.numel[k] = params[i].numel();
    if (list.count == kernels::kAdamWTensorsPerLaunch) flush();
  }
  flush();
#else
  (void)step;
  (void)hyper;
  (void)advance_step;
#endif
}

void adamw_reference_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                          const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                          const std::vector<at::Tensor>& bf16_copies, const at::Tensor& step,
                          const AdamWHyperparams& hyper) {
  at::NoGradGuard no_grad;
  // The hyperparameters as an fp32 AdamW holds them (0.999 is not an fp32 number: 1 − β2 differs by
  // 1.3e-5 relative), then every operation in fp64: the oracle for an fp32 implementation.
  auto f32 = [](double x) { return static_cast<double>(static_cast<float>(x)); };
  const AdamWHyperparams h{f32(hyper.lr), f32(hyper.beta1), f32(hyper.beta2), f32(hyper.eps), f32(hyper.weight_decay)};
  step.add_(1);
  const double t = step.item<double>();
  const double step_size = h.lr / (1.0 - std::pow(h.beta1, t));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(h.beta2, t));
  for (size_t i = 0; i < params.size(); ++i) {
    auto p = params[i].to(at::kDouble), g = grads[i].to(at::kDouble);
    auto m = exp_avgs[i].to(at::kDouble), v = exp_avg_sqs[i].to(at::kDouble);
    p.mul_(1.0 - h.lr * h.weight_decay);
    m.mul_(h.beta1).add_(g, 1.0 - h.beta1);
    v.mul_(h.beta2).addcmul_(g, g, 1.0 - h.beta2);
    p.sub_(m / (v.sqrt() / bc2_sqrt + h.eps) * step_size);
    params[i].copy_(p);
    exp_avgs[i].copy_(m);
    exp_avg_sqs[i].copy_(v);
    if (i < bf16_copies.size() && bf16_copies[i].defined()) bf16_copies[i].copy_(p);
  }
}

}  // namespace lmscale::ops
