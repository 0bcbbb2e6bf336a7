// Linear's bf16 weight copy (read by bf16-autocast forwards instead of re-casting the fp32 weight):
// the same forward and gradients as autocast's own cast, and a stale copy is never read. Runs on the
// CPU (bf16 autocast exists there too); the GPU path is exercised by fused_model_test.cpp.
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

TEST(Bf16WeightCopy, SameForwardAndGradientAsAutocastCast) {
  torch::manual_seed(21);
  Linear lin(19, 13);  // odd sizes
  auto x = torch::randn({3, 5, 19});
  auto [y_cast, g_cast] = forward_backward(lin, x);
  lin->attach_bf16_copy();
  auto [y_copy, g_copy] = forward_backward(lin, x);
  EXPECT_EQ(y_copy.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(y_copy, y_cast));  // the copy is exactly autocast's cast: same bits
  EXPECT_TRUE(torch::equal(g_copy, g_cast));
  EXPECT_EQ(g_copy.scalar_type(), torch::kFloat);
}

TEST(Bf16WeightCopy, StaleCopyIsIgnoredAfterAnAtenWrite) {
  torch::manual_seed(22);
  Linear lin(8, 4);
  lin->attach_bf16_copy();
  {
    AutocastScope autocast(torch::kCPU, torch::kBFloat16);
    EXPECT_EQ(lin->autocast_weight().scalar_type(), torch::kBFloat16);  // the copy, through its autograd node
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
