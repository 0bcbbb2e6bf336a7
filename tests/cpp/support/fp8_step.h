// Test support for the fp8 training step on a Hopper GPU: whether one is here, the small step the fp8
// tests train (every block layer in FP8: min_dim 0) and its losses over a few steps. Shared by
// tests/cpp/train/fp8_step_test.cpp and tests/cpp/train_app/fp8_checkpoint_test.cpp.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "ops/fp8_gemm.h"
#include "train/training_step.h"

namespace lmscale::testing {

inline bool hopper() {
  return torch::cuda::is_available() && ops::fp8_unsupported_reason(torch::Device(torch::kCUDA)).empty();
}

// A tiny model (C 128, 4 heads, d_ff 320, V 1024) at B 4, T 64 with flash attention on the GPU.
inline StepSetup fp8_step_setup(c10::ScalarType precision) {
  StepSetup s;
  s.model = model_config("tiny");
  s.model.d_model = 128;
  s.model.num_heads = 4;
  s.model.d_ff = 320;
  s.model.vocab_size = 1024;
  s.model.context_length = 64;
  s.model.attention = AttentionBackend::Flash;
  s.context = 64;
  s.batch = 4;
  s.precision = precision;
  s.fp8.min_dim = 0;
  s.device = torch::Device(torch::kCUDA);
  return s;
}

// n training steps on the step's own batch; the loss of each.
inline std::vector<double> step_losses(TrainingStep& step, int n) {
  std::vector<double> out;
  for (int i = 0; i < n; ++i) {
    step.run(StepMode::TrainStep);
    out.push_back(step.last_loss().item<double>());
  }
  return out;
}

}  // namespace lmscale::testing
