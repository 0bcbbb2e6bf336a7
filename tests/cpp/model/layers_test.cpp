// RoPE against a direct per-element formula, RMSNorm against its definition, initialisation ranges.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "model/layers.h"

namespace lmscale {

TEST(RotaryEmbedding, MatchesDirectFormula) {
  const int64_t B = 2, H = 3, T = 7, D = 8;
  RotaryEmbedding rope(10000.0, D, 16);
  auto x = torch::randn({B, H, T, D}, torch::kDouble);
  rope->to(torch::kDouble);
  auto y = rope(x);
  auto expected = torch::empty_like(x);
  auto xa = x.accessor<double, 4>();
  auto ea = expected.accessor<double, 4>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t k = 0; k < D / 2; ++k) {
          const double angle = t * std::pow(10000.0, -2.0 * k / D);
          const double x0 = xa[b][h][t][2 * k], x1 = xa[b][h][t][2 * k + 1];
          ea[b][h][t][2 * k] = x0 * std::cos(angle) - x1 * std::sin(angle);
          ea[b][h][t][2 * k + 1] = x0 * std::sin(angle) + x1 * std::cos(angle);
        }
  // Tables are built in fp64 and stored in fp32, so agreement is at fp32 rounding.
  EXPECT_TRUE(torch::allclose(y, expected, 1e-6, 1e-6)) << (y - expected).abs().max().item<double>();
}

TEST(RotaryEmbedding, PreservesPairNorms) {
  RotaryEmbedding rope(10000.0, 16, 32);
  auto x = torch::randn({1, 2, 32, 16});
  auto y = rope(x);
  auto pair_norm = [](const torch::Tensor& t) { return t.view({1, 2, 32, 8, 2}).pow(2).sum(-1); };
  EXPECT_TRUE(torch::allclose(pair_norm(x), pair_norm(y), 1e-5, 1e-5));
}

TEST(RotaryEmbedding, RejectsTooLongSequence) {
  RotaryEmbedding rope(10000.0, 8, 4);
  EXPECT_THROW(rope(torch::randn({1, 1, 5, 8})), c10::Error);
}

TEST(RMSNorm, MatchesDefinitionAndKeepsDtype) {
  RMSNorm norm(16);
  {
    torch::NoGradGuard g;
    norm->gain.copy_(torch::randn({16}));
  }
  auto x = torch::randn({3, 5, 16}, torch::kDouble);
  auto expected = x / torch::sqrt(x.pow(2).mean(-1, true) + 1e-5) * norm->gain.to(torch::kDouble);
  EXPECT_TRUE(torch::allclose(norm(x.to(torch::kFloat)).to(torch::kDouble), expected, 1e-5, 1e-5));
  EXPECT_EQ(norm(x.to(torch::kBFloat16)).scalar_type(), torch::kBFloat16);
}

TEST(Init, TruncatedNormalStaysWithinThreeStd) {
  Linear lin(300, 500);
  const double std = std::sqrt(2.0 / 800.0);
  EXPECT_LE(lin->weight.abs().max().item<double>(), 3 * std + 1e-7);
  // A truncated (±3σ) normal has std ≈ 0.986σ.
  EXPECT_NEAR(lin->weight.std().item<double>(), 0.986 * std, 0.02 * std);
  Embedding emb(1000, 64);
  EXPECT_LE(emb->weight.abs().max().item<double>(), 3.0 + 1e-6);
  EXPECT_NEAR(emb->weight.std().item<double>(), 0.986, 0.02);
}

}  // namespace lmscale

namespace lmscale {

TEST(Init, DeferredInitMatchesTheSpecifiedDistributions) {
  Linear lin{nullptr};
  {
    DeferInitGuard defer;
    lin = Linear(200, 600);
  }
  EXPECT_FALSE(DeferInitGuard::active());
  lin->weight.detach().fill_(100.0);  // stand-in for uninitialised memory
  init_parameters(*lin);
  const double std = std::sqrt(2.0 / 800.0);
  EXPECT_LE(lin->weight.abs().max().item<double>(), 3 * std + 1e-7);
  EXPECT_NEAR(lin->weight.std().item<double>(), 0.986 * std, 0.02 * std);
}

}  // namespace lmscale
