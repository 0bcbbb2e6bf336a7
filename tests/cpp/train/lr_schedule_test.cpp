// The warm-up + cosine learning rate against its closed form, the clipping against a direct
// computation of the global norm.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "train/grad_clip.h"
#include "train/lr_schedule.h"

namespace lmscale {
namespace {

TEST(LrSchedule, WarmupThenCosineToTheFloor) {
  const LrSchedule s{/*peak=*/3e-3, /*floor=*/3e-4, /*warmup=*/10, /*total=*/110};
  for (int64_t t = 0; t <= 10; ++t) EXPECT_DOUBLE_EQ(lr_at(s, t), 3e-3 * t / 10) << t;  // linear, peak at 10
  EXPECT_DOUBLE_EQ(lr_at(s, 60), (3e-3 + 3e-4) / 2);  // half-way through the cosine: the mean
  for (int64_t t : {11, 35, 85, 109}) {
    const double expected = 3e-4 + 0.5 * (1 + std::cos(M_PI * (t - 10) / 100.0)) * (3e-3 - 3e-4);
    EXPECT_NEAR(lr_at(s, t), expected, 1e-15) << t;
  }
  EXPECT_DOUBLE_EQ(lr_at(s, 110), 3e-4);  // the last step: the floor
  EXPECT_DOUBLE_EQ(lr_at(s, 500), 3e-4);  // and after it
  for (int64_t t = 11; t <= 110; ++t) EXPECT_LE(lr_at(s, t), lr_at(s, t - 1)) << t;  // never rises after warm-up
}

TEST(LrSchedule, NoWarmupStartsAtThePeakAndBadFieldsAreNamed) {
  const LrSchedule s{1e-3, 0, 0, 4};
  EXPECT_DOUBLE_EQ(lr_at(s, 0), 1e-3);
  EXPECT_NEAR(lr_at(s, 2), 0.5e-3, 1e-18);
  EXPECT_DOUBLE_EQ(lr_at(s, 4), 0);
  EXPECT_THROW(validate(LrSchedule{1e-3, 2e-3, 0, 4}), c10::Error);  // floor above peak
  EXPECT_THROW(validate(LrSchedule{1e-3, 0, 5, 4}), c10::Error);     // warm-up past the end
  EXPECT_NO_THROW(validate(s));
}

TEST(GradClip, ScalesToTheGlobalNormLikeClipGradNorm) {
  torch::manual_seed(0);
  std::vector<torch::Tensor> params;
  double sq = 0;
  for (auto shape : std::vector<std::vector<int64_t>>{{5, 3}, {7}, {2, 2, 2}}) {
    auto p = torch::randn(shape).requires_grad_(true);
    p.mutable_grad() = torch::randn(shape) * 4;
    sq += p.grad().pow(2).sum().item<double>();
    params.push_back(p);
  }
  params.push_back(torch::randn({3}).requires_grad_(true));  // no gradient: ignored
  const double norm = std::sqrt(sq);
  std::vector<torch::Tensor> before;
  for (size_t i = 0; i < 3; ++i) before.push_back(params[i].grad().clone());
  // Above the norm: measured, nothing scaled.
  EXPECT_NEAR(clip_grad_norm(params, 2 * norm).item<double>(), norm, 1e-4 * norm);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(params[i].grad(), before[i]));
  // Below it: every gradient scaled by max / (norm + 1e-6), so the new norm is the max.
  EXPECT_NEAR(clip_grad_norm(params, 1.0).item<double>(), norm, 1e-4 * norm);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_TRUE(torch::allclose(params[i].grad(), before[i] * (1.0 / (norm + 1e-6)), 1e-5, 1e-7));
  EXPECT_NEAR(clip_grad_norm(params, 0).item<double>(), 1.0, 1e-5);  // 0: measure only
  EXPECT_FALSE(clip_grad_norm({torch::randn({2})}, 1.0).defined());  // no gradients at all
}

}  // namespace
}  // namespace lmscale
