// StepSetup::optimizer_in_backward: each parameter's AdamW update runs inside backward as soon as
// its gradient is final. Same numerics as the ordinary step: after several steps every parameter is
// bit-identical (the same element-wise update, the step counter advanced once per step). CPU (ATen's
// AdamW) always; GPU (the AdamW kernel, bf16 weight copies, CUDA-graph keep_grads) when present.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "train/training_step.h"

namespace lmscale {
namespace {

void expect_same_training(StepSetup s, bool keep_grads) {
  s.optimizer_in_backward = false;
  TrainingStep ordinary(s);
  s.optimizer_in_backward = true;
  TrainingStep in_backward(s);
  for (int i = 0; i < 3; ++i) {
    ordinary.run(StepMode::TrainStep, nullptr, keep_grads);
    in_backward.run(StepMode::TrainStep, nullptr, keep_grads);
    EXPECT_TRUE(torch::equal(ordinary.last_loss(), in_backward.last_loss())) << "step " << i;
  }
  auto a = ordinary.model()->named_parameters(), b = in_backward.model()->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i].value(), b[i].value())) << a[i].key();
    EXPECT_EQ(b[i].value().grad().defined(), keep_grads) << a[i].key();  // dropped, or zeroed in place
  }
  // Outside run(TrainStep) the hooks stay quiet: forward + backward leaves gradients, moves nothing.
  auto before = b.front().value().clone();
  in_backward.forward(StepMode::ForwardBackward);
  in_backward.backward();
  EXPECT_TRUE(torch::equal(before, b.front().value()));
  EXPECT_TRUE(b.front().value().grad().defined());
}

}  // namespace

TEST(OptimizerInBackward, SameParametersAsTheOrdinaryStepOnCpu) {
  StepSetup s;
  s.context = 16;
  s.batch = 2;
  for (bool keep : {false, true}) expect_same_training(s, keep);
}

TEST(OptimizerInBackward, SameParametersAsTheOrdinaryStepOnGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  StepSetup s;
  s.context = 32;
  s.batch = 2;
  s.device = torch::Device(torch::kCUDA);
  s.precision = torch::kBFloat16;
  for (bool keep : {false, true}) expect_same_training(s, keep);
}

}  // namespace lmscale
