// One training step of the LM; see training_step.h.
#include "train/training_step.h"

#include <torch/torch.h>

#include "core/autocast.h"
#include "core/device.h"
#include "core/nvtx.h"

namespace lmscale {

BenchMode parse_mode(const std::string& n) {
  if (n == "forward" || n == "fwd") return BenchMode::Forward;
  if (n == "forward-backward" || n == "fwd-bwd" || n == "forward_backward") return BenchMode::ForwardBackward;
  if (n == "train-step" || n == "train" || n == "step" || n == "train_step") return BenchMode::TrainStep;
  TORCH_CHECK(false, "mode '", n, "' is not a mode: use forward, forward-backward or train-step");
}

std::string mode_name(BenchMode m) {
  switch (m) {
    case BenchMode::Forward: return "forward";
    case BenchMode::ForwardBackward: return "forward-backward";
    case BenchMode::TrainStep: return "train-step";
  }
  return "?";
}

void validate(const StepSetup& s) {
  s.model.validate();
  TORCH_CHECK(s.batch > 0, "batch must be positive, got ", s.batch);
  TORCH_CHECK(s.context > 0, "context must be positive, got ", s.context);
  TORCH_CHECK(s.context <= s.model.context_length, "context ", s.context, " is longer than the model's context_length ",
              s.model.context_length, ": raise model.context_length (lmscale bench: --model-context)");
  TORCH_CHECK(s.precision == c10::kFloat || s.precision == c10::kBFloat16 || s.precision == c10::kHalf,
              "precision ", c10::toString(s.precision), " is not supported: use fp32, bf16 or fp16");
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
  std::vector<torch::Tensor> params = model_->parameters();
  optimizer_ = std::make_unique<FusedAdamW>(params, setup_.adamw);
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(setup_.device);
  inputs_ = torch::randint(setup_.model.vocab_size, {setup_.batch, setup_.context}, opts);
  targets_ = torch::randint(setup_.model.vocab_size, {setup_.batch, setup_.context}, opts);
}

void TrainingStep::forward(BenchMode mode) {
  ScopedRange r("forward");
  std::optional<torch::NoGradGuard> no_grad;
  if (mode == BenchMode::Forward) no_grad.emplace();
  AutocastScope autocast(setup_.device.type(), setup_.precision);
  loss_ = cross_entropy(model_(inputs_), targets_);
}

void TrainingStep::backward() {
  TORCH_CHECK(loss_.defined() && loss_.requires_grad(), "TrainingStep::backward needs a forward with autograd first");
  ScopedRange r("backward");
  loss_.backward();  // outside autocast, as PyTorch recommends
}

void TrainingStep::optimizer_step(bool keep_grads) {
  ScopedRange r("optimizer");
  optimizer_->step();
  optimizer_->zero_grad(!keep_grads);
}

void TrainingStep::run(BenchMode mode, StepClock* clock, bool keep_grads) {
  if (clock) clock->mark();
  forward(mode);
  if (clock) clock->mark();
  if (mode == BenchMode::Forward) return;
  backward();
  if (clock) clock->mark();
  if (mode == BenchMode::ForwardBackward) {
    optimizer_->zero_grad(!keep_grads);
    return;
  }
  optimizer_step(keep_grads);
  if (clock) clock->mark();
}

double TrainingStep::flops(BenchMode mode) const {
  const auto& m = setup_.model;
  const double B = setup_.batch, T = setup_.context, d = m.d_model, L = m.num_layers;
  const double linear_params = L * (4 * d * d + 3 * d * m.d_ff) + d * m.vocab_size;
  const double forward = 2 * B * T * linear_params + L * 4 * B * T * T * d;  // + QKᵀ and PV
  return mode == BenchMode::Forward ? forward : 3 * forward;
}

}  // namespace lmscale
