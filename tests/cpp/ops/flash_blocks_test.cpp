// The block plan that runs masks the CUDA kernels cannot apply yet (flash_blocks.h), on CPU: the plan itself,
// and both executors with the fp64 reference standing in for the kernels (and held to the kernels' contract:
// equal head counts, causal only on a square), against the reference's own mask in one call. What runs on
// CUDA around the kernels is this ATen code with the kernels plugged in.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "ops/flash_blocks.h"
#include "ops/flash_reference.h"
#include "ops/flash_reference_plain.h"

namespace lmscale::ops {
namespace {

using test::max_diff;
using test::max_diff_lse;

std::string str(const std::vector<FlashBlock>& blocks) {
  std::string s;
  for (const auto& b : blocks)
    s += "[" + std::to_string(b.q0) + "+" + std::to_string(b.nq) + " x " + std::to_string(b.k0) + "+" +
         std::to_string(b.nk) + (b.causal ? " causal] " : "] ");
  return s;
}

std::string plan(const FlashMask& m, int64_t nq, int64_t nk) {
  auto blocks = square_kernel_blocks(m, nq, nk);
  return blocks ? str(*blocks) : "none";
}

TEST(FlashBlocks, PlansForTheCausalAlignments) {
  const FlashMask top_left{true, false}, bottom_right{true, true};
  // Square: one kernel call, either alignment.
  EXPECT_EQ(plan(top_left, 8, 8), "[0+8 x 0+8 causal] ");
  EXPECT_EQ(plan(bottom_right, 8, 8), "[0+8 x 0+8 causal] ");
  // Top-left: keys past Nq unseen; rows past Nk see every key.
  EXPECT_EQ(plan(top_left, 5, 12), "[0+5 x 0+5 causal] ");
  EXPECT_EQ(plan(top_left, 12, 5), "[0+5 x 0+5 causal] [5+7 x 0+5] ");
  // Bottom-right: the first Nk - Nq keys in full beside a causal square; rows before Nq - Nk see no key.
  EXPECT_EQ(plan(bottom_right, 5, 12), "[0+5 x 0+7] [0+5 x 7+5 causal] ");
  EXPECT_EQ(plan(bottom_right, 12, 5), "[7+5 x 0+5 causal] ");
  // Decoding (Nq = 1, bottom-right): one query that sees every key, one call.
  EXPECT_EQ(plan(bottom_right, 1, 9), "[0+1 x 0+9] ");
  // No mask: one call.
  EXPECT_EQ(plan(FlashMask{}, 3, 9), "[0+3 x 0+9] ");
}

TEST(FlashBlocks, WindowsRunWhenTheyHideNothingOnTheLeft) {
  // A window wider than the keys is no window; (-1, 0) is causal; a right-only bound is a shifted diagonal.
  EXPECT_EQ(plan(FlashMask{false, true, 100, -1}, 6, 6), "[0+6 x 0+6] ");
  EXPECT_EQ(plan(FlashMask{true, true, 5, -1}, 6, 6), "[0+6 x 0+6 causal] ");  // row 5 sees keys 0..5 anyway
  EXPECT_EQ(plan(FlashMask{false, false, -1, 0}, 6, 6), "[0+6 x 0+6 causal] ");
  EXPECT_EQ(plan(FlashMask{false, false, -1, 2}, 6, 6), "[0+4 x 0+2] [0+4 x 2+4 causal] [4+2 x 0+6] ");
  EXPECT_EQ(plan(FlashMask{false, false, -1, 5}, 6, 6), "[0+6 x 0+6] ");
  // A window that hides keys on the left has no blocks (CUDA refuses it for now).
  EXPECT_EQ(plan(FlashMask{true, true, 4, -1}, 6, 6), "none");
  EXPECT_EQ(plan(FlashMask{false, false, 2, 2}, 6, 6), "none");
}

// The reference restricted to the kernels' contract, counting its calls.
struct FakeKernels {
  int calls = 0;
  SquareForward forward() {
    return [this](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, double scale) {
      ++calls;
      EXPECT_EQ(q.size(-3), k.size(-3)) << "the kernels get equal head counts";
      EXPECT_TRUE(!causal || q.size(-2) == k.size(-2)) << "causal only on a square";
      return flash_reference_forward(q, k, v, FlashMask{causal}, scale, 16);
    };
  }
  SquareBackward backward() {
    return [this](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o,
                  const at::Tensor& L, const at::Tensor& dout, bool causal, double scale) {
      ++calls;
      EXPECT_EQ(q.size(-3), k.size(-3));
      EXPECT_TRUE(!causal || q.size(-2) == k.size(-2));
      return flash_reference_backward(q, k, v, o, L, dout, FlashMask{causal}, scale, 16);
    };
  }
};

TEST(FlashBlocks, ExecutorsMatchTheMaskInOneCall) {
  torch::manual_seed(5);
  const std::vector<FlashMask> masks = {{true, false}, {true, true}, {false, false, -1, 3}, {false, true, -1, 2},
                                        {false, true, -1, 0},          {}};
  const std::vector<std::pair<int64_t, int64_t>> lengths = {{1, 1}, {1, 40}, {40, 1}, {23, 57}, {57, 23}, {32, 32}};
  const std::vector<std::pair<int64_t, int64_t>> heads = {{4, 4}, {4, 2}, {4, 1}};
  for (const auto& m : masks)
    for (const auto& [nq, nk] : lengths)
      for (const auto& [hq, hkv] : heads) {
        const std::string what = "causal=" + std::to_string(m.causal) + " br=" + std::to_string(m.bottom_right) +
                                 " right=" + std::to_string(m.window_right) + " Nq=" + std::to_string(nq) +
                                 " Nk=" + std::to_string(nk) + " heads " + std::to_string(hq) + "/" +
                                 std::to_string(hkv);
        auto blocks = square_kernel_blocks(m, nq, nk);
        ASSERT_TRUE(blocks) << what;
        auto q = torch::randn({2, hq, nq, 8}, torch::kDouble), k = torch::randn({2, hkv, nk, 8}, torch::kDouble),
             v = torch::randn({2, hkv, nk, 8}, torch::kDouble);
        auto [want_o, want_l] = flash_reference_forward(q, k, v, m, 0.4);
        FakeKernels kernels;
        auto [o, L] = forward_by_blocks(q, k, v, *blocks, 0.4, kernels.forward());
        EXPECT_EQ(kernels.calls, static_cast<int>(blocks->size())) << what;
        EXPECT_LT(max_diff(o, want_o), 1e-10) << what << " plan " << str(*blocks);
        EXPECT_LT(max_diff_lse(L, want_l), 1e-10) << what << " plan " << str(*blocks);
        auto dout = torch::randn_like(o);
        auto [wq, wk, wv] = flash_reference_backward(q, k, v, want_o, want_l, dout, m, 0.4);
        auto [dq, dk, dv] = backward_by_blocks(q, k, v, o, L, dout, *blocks, 0.4, kernels.backward());
        ASSERT_EQ(dk.sizes(), k.sizes()) << what;
        EXPECT_LT(max_diff(dq, wq), 1e-9) << what << " plan " << str(*blocks);
        EXPECT_LT(max_diff(dk, wk), 1e-9) << what << " plan " << str(*blocks);
        EXPECT_LT(max_diff(dv, wv), 1e-9) << what << " plan " << str(*blocks);
      }
}

TEST(FlashBlocks, LowPrecisionBlocksMergeInFp32) {
  // bf16 blocks (what the kernels return) merged and summed in fp32: within bf16 rounding of the fp64 result.
  torch::manual_seed(6);
  const FlashMask m{true, true};
  auto q = torch::randn({1, 2, 30, 16}, torch::kDouble), k = torch::randn({1, 2, 70, 16}, torch::kDouble),
       v = torch::randn({1, 2, 70, 16}, torch::kDouble);
  auto b = [](const torch::Tensor& t) { return t.to(torch::kBFloat16); };
  auto [want_o, want_l] = flash_reference_forward(b(q).to(torch::kDouble), b(k).to(torch::kDouble),
                                                  b(v).to(torch::kDouble), m);
  FakeKernels kernels;
  auto [o, L] = forward_by_blocks(b(q), b(k), b(v), *square_kernel_blocks(m, 30, 70), 0.25, kernels.forward());
  EXPECT_EQ(kernels.calls, 2);
  EXPECT_EQ(o.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(L.scalar_type(), torch::kFloat);
  EXPECT_LT(max_diff(o, want_o), 2e-2);
  EXPECT_LT(max_diff_lse(L, want_l), 1e-4);
}

}  // namespace
}  // namespace lmscale::ops
