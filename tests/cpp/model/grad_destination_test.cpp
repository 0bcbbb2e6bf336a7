// The weight-gradient GEMM writing straight into a destination (model/grad_destination.h): the same
// gradient as autograd's .grad (fp32: bit for bit; bf16: that gradient rounded once), no .grad left
// on the weight, written() called once per weight, the packed q/k/v case as one GEMM into adjacent
// slots, and autograd's path when the slots are not one block. On the CPU, under bf16 autocast.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>

#include "core/autocast.h"
#include "model/grad_destination.h"
#include "model/layers.h"

namespace lmscale {

namespace {

// Slots carved out of one flat buffer in the order given (so consecutive weights are adjacent rows).
class FlatDestination : public WeightGradDestination {
 public:
  FlatDestination(const std::vector<torch::Tensor>& weights, torch::ScalarType dtype, bool gap = false) {
    int64_t total = 0;
    for (const auto& w : weights) total += w.numel() + (gap ? 1 : 0);
    flat = torch::full({total}, std::nan(""), torch::TensorOptions().dtype(dtype));  // poisoned
    int64_t off = 0;
    for (const auto& w : weights) {
      slots[w.unsafeGetTensorImpl()] = flat.narrow(0, off, w.numel()).view(w.sizes());
      off += w.numel() + (gap ? 1 : 0);
    }
  }
  at::Tensor slot(const at::Tensor& w) override { return slots.at(w.unsafeGetTensorImpl()); }
  void written(const at::Tensor& w) override { ++calls[w.unsafeGetTensorImpl()]; }
  torch::Tensor flat;
  std::map<const void*, torch::Tensor> slots;
  std::map<const void*, int> calls;
};

torch::Tensor backward_through(const std::vector<torch::Tensor>& weights, const torch::Tensor& x,
                               WeightGradDestination* destination) {
  auto copy = torch::cat(weights, 0).detach().to(torch::kBFloat16);
  torch::Tensor y;
  {
    AutocastScope autocast(torch::kCPU, torch::kBFloat16);
    y = linear_on_bf16_copy(x, copy, weights, destination);
  }
  y.to(torch::kFloat).pow(2).sum().backward();
  return y;
}

}  // namespace

TEST(GradDestination, Fp32SlotGetsAutogradsGradientBitForBitAndNoGradIsLeft) {
  torch::manual_seed(5);
  auto w = torch::randn({13, 19}).requires_grad_();
  auto x = torch::randn({3, 5, 19});
  backward_through({w}, x, nullptr);
  const auto expected = w.grad().clone();
  w.mutable_grad().reset();
  FlatDestination dest({w}, torch::kFloat);
  backward_through({w}, x, &dest);
  EXPECT_FALSE(w.grad().defined()) << "autograd must get no gradient for a weight written in place";
  EXPECT_TRUE(torch::equal(dest.slot(w), expected));
  EXPECT_EQ(dest.calls[w.unsafeGetTensorImpl()], 1);
}

TEST(GradDestination, Bf16SlotIsTheGradientRoundedOnce) {
  torch::manual_seed(6);
  auto w = torch::randn({16, 24}).requires_grad_();
  auto x = torch::randn({7, 24});
  backward_through({w}, x, nullptr);
  const auto expected = w.grad().clone();
  w.mutable_grad().reset();
  FlatDestination dest({w}, torch::kBFloat16);
  backward_through({w}, x, &dest);
  const auto got = dest.slot(w).to(torch::kFloat);
  // One rounding of fp32 sums to bf16: within half a bf16 ulp (2^-9 relative) of the fp32 gradient.
  EXPECT_TRUE(torch::allclose(got, expected, /*rtol=*/1.0 / 256, /*atol=*/1e-6))
      << (got - expected).abs().max().item<double>();
}

TEST(GradDestination, PackedWeightsAreOneGemmIntoAdjacentSlots) {
  torch::manual_seed(7);
  std::vector<torch::Tensor> qkv{torch::randn({8, 12}).requires_grad_(), torch::randn({8, 12}).requires_grad_(),
                                 torch::randn({8, 12}).requires_grad_()};
  auto x = torch::randn({2, 3, 12});
  backward_through(qkv, x, nullptr);
  std::vector<torch::Tensor> expected;
  for (auto& w : qkv) {
    expected.push_back(w.grad().clone());
    w.mutable_grad().reset();
  }
  FlatDestination dest(qkv, torch::kFloat);
  backward_through(qkv, x, &dest);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_FALSE(qkv[i].grad().defined());
    EXPECT_TRUE(torch::equal(dest.slot(qkv[i]), expected[i])) << "block " << i;
    EXPECT_EQ(dest.calls[qkv[i].unsafeGetTensorImpl()], 1);
  }
}

TEST(GradDestination, SlotsThatAreNotOneBlockFallBackToAutograd) {
  torch::manual_seed(8);
  std::vector<torch::Tensor> qkv{torch::randn({4, 6}).requires_grad_(), torch::randn({4, 6}).requires_grad_(),
                                 torch::randn({4, 6}).requires_grad_()};
  FlatDestination dest(qkv, torch::kFloat, /*gap=*/true);
  backward_through(qkv, torch::randn({5, 6}), &dest);
  for (const auto& w : qkv) {
    EXPECT_TRUE(w.grad().defined()) << "a gap between the slots must leave the gradient to autograd";
    EXPECT_EQ(dest.calls.count(w.unsafeGetTensorImpl()), 0u);
  }
}

}  // namespace lmscale
