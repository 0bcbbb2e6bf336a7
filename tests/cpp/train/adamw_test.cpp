// FusedAdamW against libtorch's own torch::optim::AdamW (PyTorch semantics) over several steps.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "train/adamw.h"

namespace lmscale {

TEST(FusedAdamW, MatchesLibtorchAdamW) {
  torch::manual_seed(4);
  std::vector<torch::Tensor> ours, ref;
  for (auto shape : std::vector<std::vector<int64_t>>{{7, 5}, {13}, {3, 4, 2}}) {
    auto t = torch::randn(shape);
    ours.push_back(t.clone().requires_grad_(true));
    ref.push_back(t.clone().requires_grad_(true));
  }
  AdamWOptions o;
  o.lr = 3e-3;
  o.weight_decay = 0.05;
  FusedAdamW fused(ours, o);
  torch::optim::AdamW libtorch(ref, torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(
                                        o.weight_decay));
  for (int step = 0; step < 6; ++step) {
    for (size_t i = 0; i < ours.size(); ++i) {
      auto g = torch::randn_like(ours[i]);
      ours[i].mutable_grad() = g.clone();
      ref[i].mutable_grad() = g.clone();
    }
    fused.step();
    libtorch.step();
    for (size_t i = 0; i < ours.size(); ++i)
      EXPECT_TRUE(torch::allclose(ours[i], ref[i], 1e-6, 1e-7))
          << "step " << step << " param " << i << " max diff " << (ours[i] - ref[i]).abs().max().item<double>();
  }
  EXPECT_GT(fused.state_bytes(), 0);
}

TEST(FusedAdamW, SkipsParamsWithoutGradAndZeroGradModes) {
  auto a = torch::randn({4}).requires_grad_(true), b = torch::randn({4}).requires_grad_(true);
  auto b0 = b.detach().clone();
  FusedAdamW opt({a, b});
  a.mutable_grad() = torch::ones({4});
  opt.step();
  EXPECT_TRUE(torch::equal(b, b0));
  opt.zero_grad(/*set_to_none=*/false);
  EXPECT_TRUE(a.grad().defined());
  EXPECT_EQ(a.grad().abs().sum().item<double>(), 0.0);
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

TEST(FusedAdamW, RejectsBadOptions) {
  AdamWOptions o;
  o.beta1 = 1.5;
  EXPECT_THROW(FusedAdamW({torch::zeros({1})}, o), c10::Error);
}

}  // namespace lmscale
