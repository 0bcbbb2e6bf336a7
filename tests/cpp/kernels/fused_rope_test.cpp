// The fused QKV-split + RoPE op (ops/fused_rope.h): its ATen reference against RotaryEmbedding on
// the CPU, and the CUDA kernel against the reference run in fp64, forward and backward, at odd sizes
// (head dim 10, 3 heads, T = 7, a strided input). Tolerances: fp32 1e-6 relative; bf16: one rounding
// of each output, 8e-3 relative to the tensor's max.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/layers.h"
#include "ops/fused_rope.h"

namespace lmscale {
namespace {

constexpr int64_t B = 2, T = 7, H = 3, D = 10, C = H * D;

double max_rel(const torch::Tensor& a, const torch::Tensor& b) {
  auto x = a.to(torch::kDouble).cpu(), y = b.to(torch::kDouble).cpu();
  return (x - y).abs().max().item<double>() / std::max(1e-12, y.abs().max().item<double>());
}

}  // namespace

TEST(RopeQkvReference, MatchesRotaryEmbeddingAndSplit) {
  torch::manual_seed(41);
  RotaryEmbedding rope(10000.0, D, 16);
  auto qkv = torch::randn({B, T, 3 * C}, torch::kDouble).requires_grad_(true);
  auto [q, k, v] = ops::rope_qkv(qkv, rope->rotation, H);
  auto split = [&](int i) { return qkv.narrow(-1, i * C, C).view({B, T, H, D}).transpose(1, 2); };
  auto rq = rope(split(0)), rk = rope(split(1)), rv = split(2);
  EXPECT_LT(max_rel(q, rq), 1e-12);
  EXPECT_LT(max_rel(k, rk), 1e-12);
  EXPECT_TRUE(torch::equal(v, rv));
  // Backward through both: the same gradient.
  auto w = torch::randn({3, B, H, T, D}, torch::kDouble);
  auto g1 = torch::autograd::grad({(q * w[0]).sum() + (k * w[1]).sum() + (v * w[2]).sum()}, {qkv})[0];
  auto g2 = torch::autograd::grad({(rq * w[0]).sum() + (rk * w[1]).sum() + (rv * w[2]).sum()}, {qkv})[0];
  EXPECT_LT(max_rel(g1, g2), 1e-12);
}

TEST(RopeQkvKernel, MatchesFp64ReferenceForwardAndBackward) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  RotaryEmbedding rope(10000.0, D, 16);
  rope->to(torch::kCUDA);
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    for (bool strided : {false, true}) {
      torch::manual_seed(42);
      auto opts = torch::TensorOptions().dtype(dtype).device(torch::kCUDA);
      // strided: rows of 3C taken from a wider matrix, as a view (row stride 3C + 6).
      auto base = torch::randn({B, T, 3 * C + (strided ? 6 : 0)}, opts);
      auto qkv = base.narrow(-1, 0, 3 * C).detach().requires_grad_(true);
      ASSERT_TRUE(ops::rope_qkv_uses_kernel(qkv, rope->rotation));
      auto [q, k, v] = ops::rope_qkv(qkv, rope->rotation, H);
      auto ref_in = qkv.detach().to(torch::kDouble).requires_grad_(true);
      auto [rq, rk, rv] = ops::rope_qkv(ref_in, rope->rotation, H);
      const double tol = dtype == torch::kFloat ? 1e-6 : 8e-3;
      EXPECT_LT(max_rel(q, rq), tol) << dtype << " strided " << strided;
      EXPECT_LT(max_rel(k, rk), tol) << dtype << " strided " << strided;
      EXPECT_TRUE(torch::equal(v.to(torch::kDouble), rv)) << dtype;
      EXPECT_TRUE(q.is_contiguous() && k.is_contiguous() && v.is_contiguous());
      // Backward, with v unused (its gradient is zero, not garbage).
      auto w = torch::randn({2, B, H, T, D}, opts.dtype(torch::kDouble));
      auto g = torch::autograd::grad({(q.to(torch::kDouble) * w[0]).sum() + (k.to(torch::kDouble) * w[1]).sum()},
                                     {qkv})[0];
      auto rg = torch::autograd::grad({(rq * w[0]).sum() + (rk * w[1]).sum()}, {ref_in})[0];
      EXPECT_LT(max_rel(g, rg), tol) << dtype << " strided " << strided;
      EXPECT_EQ(g.narrow(-1, 2 * C, C).abs().max().item<double>(), 0.0);
    }
  }
}

TEST(RopeQkv, RejectsBadShapes) {
  RotaryEmbedding rope(10000.0, D, 4);  // covers T = 4 only
  EXPECT_THROW(ops::rope_qkv(torch::randn({B, T, 3 * C}), rope->rotation, H), c10::Error);
  EXPECT_THROW(ops::rope_qkv(torch::randn({B, 3, 3 * C}), rope->rotation, 4), c10::Error);  // 30 / 4
}

}  // namespace lmscale
