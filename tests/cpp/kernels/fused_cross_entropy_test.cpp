// The fused cross-entropy op (ops/fused_cross_entropy.h): the reference against the model's loss and
// the closed-form gradient (softmax − one-hot) / N on the CPU, and the CUDA kernels against the
// reference run in fp64 at vocabularies that are no multiple of a vector or a block (1001, odd, so
// bf16 rows start at every offset from a 16-byte boundary; 10 000; 37 < one block), logits shifted
// by +1000 (the max subtraction must hold), a strided logits view, the allocator cache poisoned.
// Tolerances: the loss in fp32 1e-5 relative; the gradient relative to its max, fp32 1e-5, bf16 one
// rounding, 1e-2.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "kernels/fused_kernel_checks.h"
#include "model/transformer.h"
#include "ops/fused_cross_entropy.h"

namespace lmscale {

using testing::max_rel;

TEST(CrossEntropyReference, MatchesTheModelLossAndTheClosedFormGradient) {
  torch::manual_seed(71);
  auto z = (2 * torch::randn({3, 4, 37}, torch::kDouble)).requires_grad_(true);
  auto t = torch::randint(37, {3, 4}, torch::kLong);
  auto loss = ops::cross_entropy(z, t);  // the CPU runs the reference
  EXPECT_LT(max_rel(loss, cross_entropy(z, t)), 1e-14);
  auto g = torch::autograd::grad({loss}, {z})[0];
  auto expected = (torch::softmax(z.detach(), -1) - torch::one_hot(t, 37).to(torch::kDouble)) / 12.0;
  EXPECT_LT(max_rel(g, expected), 1e-13);
}

TEST(CrossEntropyKernel, MatchesFp64ReferenceForwardAndBackward) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    for (int64_t V : {1001, 10000, 37}) {
      for (bool strided : {false, true}) {
        torch::manual_seed(72);
        auto opts = torch::TensorOptions().dtype(dtype).device(torch::kCUDA);
        auto base = 3 * torch::randn({2, 7, V + (strided ? 5 : 0)}, opts) + 1000;
        auto z = base.narrow(-1, 0, V).detach().requires_grad_(true);
        auto t = torch::randint(V, {2, 7}, opts.dtype(torch::kLong));
        ASSERT_TRUE(ops::cross_entropy_uses_kernel(z, t));
        testing::poison_cuda_cache();
        auto loss = ops::cross_entropy(z, t);
        auto z64 = z.detach().to(torch::kDouble).requires_grad_(true);
        auto ref = ops::cross_entropy(z64, t);
        const std::string what = std::string(c10::toString(dtype)) + " V " + std::to_string(V) +
                                 (strided ? " strided" : "");
        EXPECT_EQ(loss.scalar_type(), torch::kFloat) << what;
        EXPECT_LT(max_rel(loss, ref), 1e-5) << what;
        testing::poison_cuda_cache();
        auto g = torch::autograd::grad({loss * 3}, {z})[0];  // an upstream gradient other than 1
        auto rg = torch::autograd::grad({ref * 3}, {z64})[0];
        EXPECT_EQ(g.scalar_type(), dtype) << what;
        EXPECT_LT(max_rel(g, rg), dtype == torch::kFloat ? 1e-5 : 1e-2) << what;
      }
    }
  }
}

TEST(CrossEntropyKernel, TargetOutsideTheVocabularyGivesNaN) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto z = torch::randn({4, 50}, torch::kCUDA);
  auto t = torch::tensor({1, 2, 50, 3}, torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA));
  EXPECT_TRUE(std::isnan(ops::cross_entropy(z, t).item<double>()));
}

TEST(CrossEntropy, RejectsBadTargets) {
  EXPECT_THROW(ops::cross_entropy(torch::randn({3, 8}), torch::zeros({4}, torch::kLong)), c10::Error);
  EXPECT_THROW(ops::cross_entropy(torch::randn({3, 8}), torch::zeros({3}, torch::kInt)), c10::Error);
}

}  // namespace lmscale
