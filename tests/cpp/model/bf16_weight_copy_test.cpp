// Linear's bf16 weight copy (read by bf16-autocast forwards instead of re-casting the fp32 weight):
// the same forward as autocast's own cast, a weight gradient that leaves the GEMM in fp32 (no bf16
// rounding: within 1e-5 of an fp64 oracle, where the cast path is within bf16's 2^-8), and a stale
// copy is never read. Runs on the CPU (bf16 autocast exists there too); the GPU path is exercised
// by fused_model_test.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/autocast.h"
#include "model/layers.h"

namespace lmscale {

namespace {
std::pair<torch::Tensor, torch::Tensor> forward_backward(Linear& lin, const torch::Tensor& x) {
  lin->weight.mutable_grad() = torch::Tensor();
  torch::Tensor y;
  {
    AutocastScope autocast(torch::kCPU, torch::kBFloat16);
    y = lin(x);
  }
  y.to(torch::kFloat).pow(2).sum().backward();
  return {y.detach(), lin->weight.grad().clone()};
}
}  // namespace

TEST(Bf16WeightCopy, SameForwardAsAutocastCastAndAnFp32WeightGradient) {
  torch::manual_seed(21);
  Linear lin(19, 13);  // odd sizes
  auto x = torch::randn({3, 5, 19});
  auto [y_cast, g_cast] = forward_backward(lin, x);
  lin->attach_bf16_copy();
  auto [y_copy, g_copy] = forward_backward(lin, x);
  EXPECT_EQ(y_copy.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(y_copy, y_cast));  // the copy is exactly autocast's cast: same bits
  EXPECT_EQ(g_copy.scalar_type(), torch::kFloat);
  // The loss is Σy² over the fp32 upcast of y, so dL/dy = 2y, exact in bf16: the oracle is
  // (2y)ᵀ · x_bf16 summed in fp64.
  auto dy = (2 * y_copy.to(torch::kDouble)).reshape({-1, 13});
  auto oracle = dy.t().mm(x.to(torch::kBFloat16).to(torch::kDouble).reshape({-1, 19}));
  const double scale = oracle.abs().max().item<double>();
  const double err_copy = (g_copy.to(torch::kDouble) - oracle).abs().max().item<double>() / scale;
  const double err_cast = (g_cast.to(torch::kDouble) - oracle).abs().max().item<double>() / scale;
  EXPECT_LT(err_copy, 1e-5);           // fp32 sums of 15 exact products, no rounding to bf16
  EXPECT_LT(err_cast, 1.0 / 256);      // autocast's path rounds the gradient to bf16 first
  EXPECT_GT(err_cast, 10 * err_copy);  // so the copy's path is measurably the more exact one
}

TEST(Bf16WeightCopy, InputGradientMatchesAutocastCast) {
  torch::manual_seed(23);
  Linear lin(24, 7);
  auto x0 = torch::randn({4, 24});
  auto input_grad = [&](bool copy) {
    if (copy) lin->attach_bf16_copy();
    auto x = x0.clone().requires_grad_(true);
    torch::Tensor y;
    {
      AutocastScope autocast(torch::kCPU, torch::kBFloat16);
      y = lin(x);
    }
    y.to(torch::kFloat).pow(2).sum().backward();
    return x.grad();
  };
  auto cast = input_grad(false), copy = input_grad(true);
  EXPECT_EQ(copy.scalar_type(), torch::kFloat);  // x's dtype, as autocast's cast of x returns
  EXPECT_TRUE(torch::equal(copy, cast));         // the same bf16 GEMM as linear's own backward
}

TEST(Bf16WeightCopy, StaleCopyIsIgnoredAfterAnAtenWrite) {
  torch::manual_seed(22);
  Linear lin(8, 4);
  lin->attach_bf16_copy();
  {
    AutocastScope autocast(torch::kCPU, torch::kBFloat16);
    EXPECT_EQ(lin->autocast_weight().scalar_type(), torch::kBFloat16);  // the copy
  }
  {
    torch::NoGradGuard no_grad;
    lin->weight.mul_(2.0);  // bumps the version: the copy no longer matches
  }
  auto x = torch::randn({2, 8});
  torch::Tensor y;
  {
    AutocastScope autocast(torch::kCPU, torch::kBFloat16);
    EXPECT_TRUE(lin->autocast_weight().is_same(lin->weight));
    y = lin(x);
  }
  auto expected = torch::linear(x.to(torch::kBFloat16), lin->weight.detach().to(torch::kBFloat16));
  EXPECT_TRUE(torch::equal(y, expected));
}

TEST(Bf16WeightCopy, UnusedOutsideBf16Autocast) {
  Linear lin(8, 4);
  lin->attach_bf16_copy();
  EXPECT_TRUE(lin->autocast_weight().is_same(lin->weight));  // no autocast: the fp32 weight
  AutocastScope autocast(torch::kCPU, torch::kFloat);            // fp32 "autocast" is off
  EXPECT_TRUE(lin->autocast_weight().is_same(lin->weight));
}

}  // namespace lmscale
