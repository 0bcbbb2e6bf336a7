// The fused training step (StepSetup::fused: AdamW kernel + bf16 weight copies, and the other fused
// pieces as they land) against the unfused one on a GPU, and the CUDA-graph step against the eager
// step. Skips without CUDA; the CPU runs the unfused model and the references elsewhere.
// Tolerances (bf16 autocast): losses after one step within 1e-3 relative, gradients within 2e-2
// relative of their own max (bf16 matmul rounding differs where fused GEMMs change the reduction
// order); ten steps of training stay within 1e-2 relative.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>

#include "core/autocast.h"
#include "model/layers.h"
#include "ops/fused_adamw.h"
#include "train/graphed_step.h"
#include "train/training_step.h"

namespace lmscale {
namespace {

StepSetup gpu_setup(bool fused) {
  StepSetup s;
  s.model = model_config("tiny");
  s.model.d_model = 96;  // head dim 24, d not a multiple of 128
  s.model.num_heads = 4;
  s.model.d_ff = 200;
  s.model.vocab_size = 1000;
  s.model.context_length = 64;
  s.model.attention = AttentionBackend::Naive;
  s.context = 48;
  s.batch = 3;
  s.precision = torch::kBFloat16;
  s.device = torch::Device(torch::kCUDA);
  s.fused = fused;
  return s;
}

double max_rel(const torch::Tensor& a, const torch::Tensor& b) {
  auto d = (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
  return d / std::max(1e-12, b.to(torch::kDouble).abs().max().item<double>());
}

}  // namespace

TEST(FusedModel, LossAndEveryGradientMatchUnfusedAfterOneStep) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  TrainingStep fused(gpu_setup(true)), plain(gpu_setup(false));
  EXPECT_EQ(fused.uses_bf16_weight_copies(), ops::fused_adamw_available());
  EXPECT_FALSE(plain.uses_bf16_weight_copies());
  for (auto* s : {&fused, &plain}) {
    s->forward(StepMode::TrainStep);
    s->backward();
  }
  EXPECT_LT(max_rel(fused.last_loss(), plain.last_loss()), 1e-3);
  auto fp = fused.model()->named_parameters(), pp = plain.model()->named_parameters();
  ASSERT_EQ(fp.size(), pp.size());
  for (const auto& item : pp) {
    const auto* f = fp.find(item.key());
    ASSERT_NE(f, nullptr) << "fused model lacks " << item.key();
    ASSERT_TRUE(f->grad().defined()) << item.key();
    EXPECT_LT(max_rel(f->grad(), item.value().grad()), 2e-2) << item.key();
  }
}

TEST(FusedModel, TenStepsTrackTheUnfusedModel) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  TrainingStep fused(gpu_setup(true)), plain(gpu_setup(false));
  for (int i = 0; i < 10; ++i) {
    fused.run(StepMode::TrainStep);
    plain.run(StepMode::TrainStep);
    EXPECT_LT(max_rel(fused.last_loss(), plain.last_loss()), 1e-2) << "step " << i;
  }
  EXPECT_EQ(fused.optimizer().ran_kernel(), ops::fused_adamw_available());
  // Training moved the loss (the same batch every step): the comparison is not of two frozen models.
  EXPECT_LT(plain.last_loss().item<double>(), std::log(1000.0));
}

// A write to the parameters from outside the step (as DDP's broadcast from rank 0) leaves the bf16 copies
// stale, so the Linears fall back to casting the weights; resync_weight_copies makes the copies those of the
// new weights and current again.
TEST(FusedModel, ResyncAfterAnOutsideWriteMakesTheCopiesCurrent) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  TrainingStep step(gpu_setup(true));
  if (!step.uses_bf16_weight_copies()) GTEST_SKIP() << "no fused AdamW kernel in this build";
  std::vector<LinearImpl*> linears;
  for (auto& m : step.model()->modules(/*include_self=*/false))
    if (auto* lin = m->as<LinearImpl>()) linears.push_back(lin);
  ASSERT_FALSE(linears.empty());
  AutocastScope autocast(torch::kCUDA, torch::kBFloat16);  // bf16_copy_current asks for bf16 autocast
  for (auto* lin : linears) EXPECT_TRUE(lin->bf16_copy_current());
  {
    torch::NoGradGuard no_grad;
    for (auto& p : step.model()->parameters()) p.mul_(0.5);  // what a broadcast's copy_ does to the version
  }
  for (auto* lin : linears) EXPECT_FALSE(lin->bf16_copy_current());
  step.resync_weight_copies();
  for (auto* lin : linears) {
    EXPECT_TRUE(lin->bf16_copy_current());
    EXPECT_TRUE(torch::equal(lin->weight_bf16, lin->weight.to(torch::kBFloat16)));
  }
  // The step still trains from the new weights.
  step.run(StepMode::TrainStep);
  EXPECT_TRUE(std::isfinite(step.last_loss().item<double>()));
  EXPECT_EQ(step.optimizer().ran_kernel(), ops::fused_adamw_available());
}

TEST(CudaGraphStep, ReplayGivesTheEagerLosses) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (bool fused : {false, true}) {
    TrainingStep graphed(gpu_setup(fused)), eager(gpu_setup(fused));
    std::string note;
    auto graph = try_capture(graphed, StepMode::TrainStep, note);
    ASSERT_NE(graph, nullptr) << note;
    // try_capture ran three eager warm-up steps: bring the eager twin to the same point.
    for (int i = 0; i < 3; ++i) eager.run(StepMode::TrainStep);
    for (int i = 0; i < 4; ++i) {
      graph->replay();
      eager.run(StepMode::TrainStep);
      // Same kernels on the same data: equal up to the order of atomics inside cuBLAS (none here).
      EXPECT_LT(max_rel(graphed.last_loss(), eager.last_loss()), 1e-6) << "fused " << fused << " step " << i;
    }
  }
}

TEST(CudaGraphStep, CpuGivesANoteNotAGraph) {
  StepSetup s;
  TrainingStep step(s);
  std::string note;
  EXPECT_EQ(try_capture(step, StepMode::TrainStep, note), nullptr);
  EXPECT_NE(note.find("cpu"), std::string::npos) << note;
}

}  // namespace lmscale
