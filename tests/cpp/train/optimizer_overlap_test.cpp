// StepSetup::optimizer_overlap (train/optimizer_overlap.h): AdamW per bucket on a side stream during
// backward. Same numerics as the ordinary step, so the bound is exact: after ten eager steps every
// parameter and every loss is bit-identical (a graph replay: losses within 1e-5 of the eager step). Small buckets force many forks and joins. CPU (one
// stream: the bucketing and bookkeeping) always; on a GPU the AdamW kernel with bf16 weight copies,
// eager and replayed from a CUDA graph.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "train/graphed_step.h"
#include "train/training_step.h"

namespace lmscale {
namespace {

void expect_identical(TrainingStep& a, TrainingStep& b, const std::string& what) {
  auto pa = a.model()->named_parameters(), pb = b.model()->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i].value(), pb[i].value())) << what << " " << pa[i].key();
}

StepSetup with_overlap(StepSetup s, bool on) {
  s.optimizer_overlap = on;
  s.overlap_bucket_bytes = 64 << 10;  // many buckets even for a tiny model
  return s;
}

}  // namespace

TEST(OptimizerOverlap, BucketsCoverEveryParameterOnce) {
  StepSetup s;
  TrainingStep step(with_overlap(s, true));
  ASSERT_TRUE(step.overlaps_optimizer());
  TrainingStep plain(with_overlap(s, false));
  EXPECT_FALSE(plain.overlaps_optimizer());
}

// The default by precision (optimizer_overlap_default): on for fp8 only, and whatever is set wins.
TEST(OptimizerOverlap, OnByDefaultForFp8OnlyAndAnExplicitChoiceWins) {
  StepSetup s;  // optimizer_overlap unset
  for (auto p : {c10::kFloat, c10::kBFloat16, c10::kHalf}) {
    s.precision = p;
    EXPECT_FALSE(s.overlaps_optimizer()) << c10::toString(p);
  }
  s.precision = c10::kFloat8_e4m3fn;
  EXPECT_TRUE(s.overlaps_optimizer());
  s.optimizer_overlap = false;
  EXPECT_FALSE(s.overlaps_optimizer());
  s.precision = c10::kBFloat16;
  s.optimizer_overlap = true;
  EXPECT_TRUE(s.overlaps_optimizer());
}

TEST(OptimizerOverlap, BitIdenticalToTheOrdinaryStepOnCpu) {
  StepSetup s;
  s.context = 16;
  s.batch = 2;
  for (bool keep : {false, true}) {
    TrainingStep ordinary(with_overlap(s, false)), overlapped(with_overlap(s, true));
    for (int i = 0; i < 10; ++i) {
      ordinary.run(StepMode::TrainStep, nullptr, keep);
      overlapped.run(StepMode::TrainStep, nullptr, keep);
      EXPECT_TRUE(torch::equal(ordinary.last_loss(), overlapped.last_loss())) << "step " << i;
    }
    expect_identical(ordinary, overlapped, keep ? "keep grads" : "grads dropped");
  }
}

TEST(OptimizerOverlap, BitIdenticalToTheOrdinaryStepOnGpuEagerAndGraphed) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  StepSetup s;
  s.model.d_model = 128;
  s.model.d_ff = 384;
  s.context = 64;
  s.batch = 2;
  s.precision = torch::kBFloat16;
  s.device = torch::Device(torch::kCUDA);
  TrainingStep ordinary(with_overlap(s, false)), overlapped(with_overlap(s, true));
  for (int i = 0; i < 10; ++i) {
    ordinary.run(StepMode::TrainStep);
    overlapped.run(StepMode::TrainStep);
    EXPECT_TRUE(torch::equal(ordinary.last_loss(), overlapped.last_loss())) << "step " << i;
  }
  expect_identical(ordinary, overlapped, "eager");
  // Graphed: the fork and join are captured; the replay must match the ordinary eager step too.
  TrainingStep base(with_overlap(s, false)), graphed(with_overlap(s, true));
  std::string note;
  auto graph = try_capture(graphed, StepMode::TrainStep, note);
  ASSERT_NE(graph, nullptr) << note;
  for (int i = 0; i < 3; ++i) base.run(StepMode::TrainStep);  // the capture's warm-up steps
  for (int i = 0; i < 7; ++i) {
    graph->replay();
    base.run(StepMode::TrainStep);
    // A replay runs the kernels the capture recorded; cuBLAS may pick other algorithms for a
    // captured GEMM than for an eager one, so graph against eager is held to fp32 rounding.
    EXPECT_TRUE(torch::allclose(base.last_loss(), graphed.last_loss(), 1e-5, 0)) << "replay " << i;
  }
}

}  // namespace lmscale
