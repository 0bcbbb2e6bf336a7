// One training step of the LM; see training_step.h.
#include "train/training_step.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include "core/autocast.h"
#include "core/device.h"
#include "core/nvtx.h"
#include "ops/fused_adamw.h"
#include "ops/fp8_gemm.h"
#include "ops/fused_cross_entropy.h"

namespace lmscale {

StepMode parse_mode(const std::string& n) {
  if (n == "forward" || n == "fwd") return StepMode::Forward;
  if (n == "forward-backward" || n == "fwd-bwd" || n == "forward_backward") return StepMode::ForwardBackward;
  if (n == "train-step" || n == "train" || n == "step" || n == "train_step") return StepMode::TrainStep;
  TORCH_CHECK(false, "mode '", n, "' is not a mode: use forward, forward-backward or train-step");
}

std::string mode_name(StepMode m) {
  switch (m) {
    case StepMode::Forward: return "forward";
    case StepMode::ForwardBackward: return "forward-backward";
    case StepMode::TrainStep: return "train-step";
  }
  return "?";
}

void validate(const StepSetup& s) {
  s.model.validate();
  TORCH_CHECK(s.batch > 0, "batch must be positive, got ", s.batch);
  TORCH_CHECK(s.context > 0, "context must be positive, got ", s.context);
  TORCH_CHECK(s.context <= s.model.context_length, "context ", s.context, " is longer than the model's context_length ",
              s.model.context_length, ": raise model.context_length (lmscale bench: --model-context)");
  TORCH_CHECK(s.precision == c10::kFloat || s.precision == c10::kBFloat16 || s.precision == c10::kHalf ||
                  s.precision == c10::kFloat8_e4m3fn,
              "precision ", c10::toString(s.precision), " is not supported: use fp32, bf16, fp16 or fp8");
  if (s.precision == c10::kFloat8_e4m3fn) {
    const auto why = ops::fp8_unsupported_reason(s.device);
    TORCH_CHECK(why.empty(), why);
  }
  if (s.device.is_cpu())
    TORCH_CHECK(s.precision != c10::kHalf, "precision fp16 autocast is not supported on CPU: use fp32 or bf16, "
                "or run on a GPU");
  if (s.model.attention == AttentionBackend::Flash) {
#ifndef LMSCALE_HAS_KERNELS
    TORCH_CHECK(s.device.is_cpu(), "attention flash on CUDA needs the lmscale kernels, which this build lacks: "
                "rebuild on a machine with nvcc (LMSCALE_CUDA=ON)");
#endif
  }
}

TrainingStep::TrainingStep(const StepSetup& setup) : setup_(setup) {
  validate(setup_);
  torch::manual_seed(setup_.seed);
  {
    DeferInitGuard defer;  // allocate on the host, initialise on the target device (much faster)
    model_ = TransformerLM(setup_.model);
  }
  model_->to(setup_.device);
  init_parameters(*model_);
  // Fused path: q, k, v weights as one GEMM operand (their storage moves, the parameters stay).
  const bool fused_cuda = setup_.fused && setup_.device.is_cuda();
  if (fused_cuda && setup_.parts.qkv_gemm) {
    model_->pack_qkv();
    model_->use_fused_rope(setup_.parts.rope_kernel);
  }
  model_->use_fused_norms(fused_cuda && setup_.parts.norm_kernel);
  model_->use_fused_swiglu(fused_cuda && setup_.parts.swiglu_kernel);
  std::vector<torch::Tensor> params = model_->parameters();
  optimizer_ = std::make_unique<FusedAdamW>(params, setup_.adamw, /*use_kernel=*/fused_cuda && setup_.parts.adamw_kernel);
  if (is_fp8()) model_->use_fp8(setup_.fp8);  // FP8 GEMMs read the bf16 copies when there are some
  resync_weight_copies();
  if (setup_.optimizer_in_backward) install_optimizer_hooks(params);
  else if (setup_.overlaps_optimizer())
    overlap_ = std::make_unique<OptimizerOverlap>(*optimizer_, setup_.overlap_bucket_bytes, setup_.overlap_sm_carveout);
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(setup_.device);
  inputs_ = torch::randint(setup_.model.vocab_size, {setup_.batch, setup_.context}, opts);
  targets_ = torch::randint(setup_.model.vocab_size, {setup_.batch, setup_.context}, opts);
}

namespace {
// Runs one parameter's AdamW update right after autograd accumulated its gradient, then clears the
// gradient (zeroed in place when the step keeps gradients at fixed addresses for a CUDA graph).
class UpdateWhenGradIsFinal : public torch::autograd::PostAccumulateGradHook {
 public:
  UpdateWhenGradIsFinal(FusedAdamW* opt, size_t index, std::shared_ptr<const void> state, const bool* armed,
                        const bool* keep_grads)
      : opt_(opt), index_(index), state_(std::move(state)), armed_(armed), keep_grads_(keep_grads) {}
  void operator()(const torch::autograd::Variable& param) override {
    if (!*armed_) return;
    opt_->step_param(index_);
    auto& grad = param.mutable_grad();
    if (*keep_grads_) grad.zero_();
    else grad = torch::Tensor();
  }

 private:
  FusedAdamW* opt_;
  size_t index_;
  std::shared_ptr<const void> state_;  // keeps armed_/keep_grads_ alive as long as the hook
  const bool* armed_;
  const bool* keep_grads_;
};
}  // namespace

void TrainingStep::install_optimizer_hooks(const std::vector<torch::Tensor>& params) {
  in_backward_ = std::make_shared<InBackward>();
  for (size_t i = 0; i < params.size(); ++i)
    torch::autograd::impl::set_post_acc_grad_hooks(
        params[i], std::make_unique<UpdateWhenGradIsFinal>(optimizer_.get(), i, in_backward_, &in_backward_->armed,
                                                           &in_backward_->keep_grads));
}

void TrainingStep::resync_weight_copies() {
  // Each Linear keeps a bf16 copy of its weight that the AdamW kernel rewrites after every update,
  // so bf16-autocast forwards stop casting ~all weights again each step (docs/training_step_notes.md).
  if (!uses_bf16_weight_copies()) return;
  bf16_copies_ = model_->attach_bf16_copies();
  optimizer_->set_bf16_copies(bf16_copies_);
  if (is_fp8() && setup_.fp8.cached_weights) {
    torch::Tensor amax_buffer;
    auto derived = model_->attach_fp8_weights(amax_buffer, setup_.fp8.scaling == Fp8Scaling::kDelayed);
    optimizer_->set_derived_weights(std::move(derived), std::move(amax_buffer));
  }
}

bool TrainingStep::uses_bf16_weight_copies() const {
  return setup_.fused && setup_.device.is_cuda() && setup_.parts.adamw_kernel && setup_.parts.bf16_weight_copies &&
         autocast_dtype(setup_.precision) == c10::kBFloat16 && ops::fused_adamw_available();
}

void TrainingStep::forward(StepMode mode) {
  ScopedRange r("forward");
  std::optional<torch::NoGradGuard> no_grad;
  if (mode == StepMode::Forward) no_grad.emplace();
  AutocastScope autocast(setup_.device.type(), setup_.precision);
  auto logits = model_(inputs_, segments_);
  const bool fused_loss = setup_.fused && setup_.device.is_cuda() && setup_.parts.cross_entropy_kernel;
  loss_ = fused_loss ? ops::cross_entropy(logits, targets_) : cross_entropy(logits, targets_);
}

void TrainingStep::backward() {
  TORCH_CHECK(loss_.defined() && loss_.requires_grad(), "TrainingStep::backward needs a forward with autograd first");
  ScopedRange r("backward");
  loss_.backward();  // outside autocast, as PyTorch recommends
  // Delayed FP8 scaling: this step's amaxes are all recorded now; fold them into the histories and set
  // the next step's scales (a no-op without histories). Inside the captured graph when the step is one.
  model_->roll_fp8_histories();
}

void TrainingStep::optimizer_step(bool keep_grads) {
  ScopedRange r("optimizer");
  optimizer_->step();
  optimizer_->zero_grad(!keep_grads);
}

void TrainingStep::run(StepMode mode, StepClock* clock, bool keep_grads) {
  if (clock) clock->mark();
  forward(mode);
  if (clock) clock->mark();
  if (mode == StepMode::Forward) return;
  const bool in_backward = in_backward_ && mode == StepMode::TrainStep;
  const bool overlap = overlap_ && mode == StepMode::TrainStep;
  if (in_backward) {
    // Each parameter updates (and drops its gradient) inside backward; the optimizer phase is empty.
    optimizer_->begin_step();
    in_backward_->armed = true;
    in_backward_->keep_grads = keep_grads;
  }
  if (overlap) overlap_->begin_backward(keep_grads);
  try {
    backward();
  } catch (...) {
    if (in_backward) in_backward_->armed = false;
    if (overlap) overlap_->abandon();
    throw;
  }
  if (overlap) overlap_->finish_backward();  // the current stream waits for the updates here
  if (clock) clock->mark();
  if (mode == StepMode::ForwardBackward) {
    optimizer_->zero_grad(!keep_grads);
    return;
  }
  if (in_backward || overlap) {
    if (in_backward) in_backward_->armed = false;
    ScopedRange r("optimizer");  // empty: kept so the phase marks and ranges stay the same
  } else {
    optimizer_step(keep_grads);
  }
  if (clock) clock->mark();
}

double TrainingStep::flops(StepMode mode) const {
  const auto& m = setup_.model;
  const double B = setup_.batch, T = setup_.context, d = m.d_model, L = m.num_layers;
  const double linear_params = L * (4 * d * d + 3 * d * m.d_ff) + d * m.vocab_size;
  const double forward = 2 * B * T * linear_params + L * 4 * B * T * T * d;  // + QKᵀ and PV
  return mode == StepMode::Forward ? forward : 3 * forward;
}

}  // namespace lmscale
