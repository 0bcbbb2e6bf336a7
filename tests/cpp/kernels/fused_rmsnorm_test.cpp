// The fused residual-add + RMSNorm op (ops/fused_rmsnorm.h): its ATen reference against the add and
// the RMSNorm module on the CPU, and the CUDA kernels against the reference run in fp64, forward and
// backward, for the dtype mixes the model uses (fp32 stream + bf16 sublayer output → bf16 normed
// input; all fp32; all bf16; no residual), at C = 1000 (vector path, not a multiple of 128) and
// C = 99 (element path), with both outputs' gradients in play and the allocator cache poisoned.
// Tolerances, relative to each tensor's max: fp32 outputs 1e-5 (fp32 math, fast rsqrt); a bf16
// output or a bf16 h the norm reads: 1e-2 (one or two bf16 roundings, 2^-8 each).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/fused_kernel_checks.h"
#include "model/layers.h"
#include "ops/fused_rmsnorm.h"

namespace lmscale {
namespace {

using testing::max_rel;
constexpr double kEps = 1e-5;

}  // namespace

TEST(RmsNormReference, MatchesAddThenRMSNormModule) {
  torch::manual_seed(51);
  RMSNorm norm(24);
  norm->to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    norm->gain.uniform_(0.5, 1.5);
  }
  auto x = torch::randn({2, 5, 24}, torch::kDouble).requires_grad_(true);
  auto r = torch::randn({2, 5, 24}, torch::kDouble).requires_grad_(true);
  auto [h, y] = ops::rms_norm(x, r, norm->gain, kEps, torch::kDouble);
  auto h2 = x + r;
  auto y2 = norm(h2);
  EXPECT_LT(max_rel(h, h2), 1e-14);
  EXPECT_LT(max_rel(y, y2), 1e-12);
  auto w = torch::randn({2, 2, 5, 24}, torch::kDouble);
  auto wrt = std::vector<torch::Tensor>{x, r, norm->gain};
  auto g1 = torch::autograd::grad({(h * w[0]).sum() + (y * w[1]).sum()}, wrt);
  auto g2 = torch::autograd::grad({(h2 * w[0]).sum() + (y2 * w[1]).sum()}, wrt);
  for (size_t i = 0; i < g1.size(); ++i) EXPECT_LT(max_rel(g1[i], g2[i]), 1e-12) << "gradient " << i;
  // Without a residual, h is x itself and y is the norm of x.
  auto [hx, yx] = ops::rms_norm(x, torch::Tensor(), norm->gain, kEps, torch::kDouble);
  EXPECT_TRUE(hx.is_same(x));
  EXPECT_LT(max_rel(yx, norm(x)), 1e-12);
}

TEST(RmsNormKernel, MatchesFp64ReferenceForwardAndBackward) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  struct Mix {
    torch::ScalarType x, residual, y;
    bool has_residual;
  };
  const Mix mixes[] = {{torch::kFloat, torch::kBFloat16, torch::kBFloat16, true},
                       {torch::kFloat, torch::kFloat, torch::kFloat, true},
                       {torch::kBFloat16, torch::kBFloat16, torch::kBFloat16, true},
                       {torch::kFloat, torch::kFloat, torch::kBFloat16, false},
                       {torch::kFloat, torch::kFloat, torch::kFloat, false}};
  for (int64_t C : {1000, 99}) {
    for (const auto& m : mixes) {
      torch::manual_seed(52);
      auto cuda = torch::TensorOptions().device(torch::kCUDA);
      auto x = (3 * torch::randn({2, 7, C}, cuda)).to(m.x).requires_grad_(true);
      auto r = m.has_residual ? torch::randn({2, 7, C}, cuda).to(m.residual).requires_grad_(true) : torch::Tensor();
      auto gain = torch::rand({C}, cuda).add_(0.5).requires_grad_(true);
      ASSERT_TRUE(ops::rms_norm_uses_kernel(x, r, gain, m.y));
      testing::poison_cuda_cache();
      auto [h, y] = ops::rms_norm(x, r, gain, kEps, m.y);
      auto x64 = x.detach().to(torch::kDouble).requires_grad_(true);
      auto r64 = m.has_residual ? r.detach().to(torch::kDouble).requires_grad_(true) : torch::Tensor();
      auto g64 = gain.detach().to(torch::kDouble).requires_grad_(true);
      auto [rh, ry] = ops::rms_norm(x64, r64, g64, kEps, torch::kDouble);
      const std::string what = "C " + std::to_string(C) + " x " + c10::toString(m.x) + " residual " +
                                (m.has_residual ? c10::toString(m.residual) : "none") + " y " + c10::toString(m.y);
      EXPECT_EQ(y.scalar_type(), m.y) << what;
      const double h_tol = m.x == torch::kFloat ? 1e-5 : 1e-2, y_tol = m.y == torch::kFloat && h_tol < 1e-4 ? 1e-5 : 1e-2;
      EXPECT_LT(max_rel(h, rh), h_tol) << what;
      EXPECT_LT(max_rel(y, ry), y_tol) << what;
      // Backward with both outputs read downstream (h by the residual stream, y by the sublayer).
      auto w = torch::randn({2, 2, 7, C}, cuda.dtype(torch::kDouble));
      testing::poison_cuda_cache();
      std::vector<torch::Tensor> wrt{x, gain}, wrt64{x64, g64};
      if (m.has_residual) wrt.push_back(r), wrt64.push_back(r64);
      auto gk = torch::autograd::grad({(h.to(torch::kDouble) * w[0]).sum() + (y.to(torch::kDouble) * w[1]).sum()}, wrt);
      auto gr = torch::autograd::grad({(rh * w[0]).sum() + (ry * w[1]).sum()}, wrt64);
      // Gradients pass through the bf16 rounding of dy (and of dx when x is bf16).
      const double g_tol = m.x == torch::kFloat && m.y == torch::kFloat ? 1e-5 : 1e-2;
      for (size_t i = 0; i < gk.size(); ++i) {
        EXPECT_EQ(gk[i].scalar_type(), wrt[i].scalar_type()) << what << " gradient " << i;
        EXPECT_LT(max_rel(gk[i], gr[i]), g_tol) << what << " gradient " << i;
      }
    }
  }
}

TEST(RmsNormKernel, GradientOfYAloneAndOfHAlone) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(53);
  auto cuda = torch::TensorOptions().device(torch::kCUDA);
  auto x = torch::randn({5, 96}, cuda).requires_grad_(true);
  auto r = torch::randn({5, 96}, cuda).requires_grad_(true);
  auto gain = torch::ones({96}, cuda).requires_grad_(true);
  auto [h, y] = ops::rms_norm(x, r, gain, kEps, torch::kFloat);
  // Only h read: its gradient passes straight through; gain gets zero.
  auto g = torch::autograd::grad({h.sum()}, {x, r, gain}, {}, /*retain_graph=*/true);
  EXPECT_TRUE(torch::allclose(g[0], torch::ones_like(x)) && torch::allclose(g[1], torch::ones_like(r)));
  EXPECT_EQ(g[2].abs().max().item<double>(), 0.0);
  // Only y read: the norm's gradient alone, as the reference gives it. (A random weighting: Σ y²
  // itself is nearly constant in x, its gradient nearly zero.)
  auto x64 = x.detach().to(torch::kDouble).requires_grad_(true);
  auto [rh, ry] = ops::rms_norm(x64, r.detach().to(torch::kDouble), gain.detach().to(torch::kDouble),
                                             kEps, torch::kDouble);
  auto w = torch::randn({5, 96}, torch::TensorOptions().dtype(torch::kDouble).device(torch::kCUDA));
  auto gy = torch::autograd::grad({(y.to(torch::kDouble) * w).sum()}, {x})[0];
  auto ry_g = torch::autograd::grad({(ry * w).sum()}, {x64})[0];
  EXPECT_LT(max_rel(gy, ry_g), 1e-5);
}

TEST(RmsNorm, RejectsMismatchedShapes) {
  auto x = torch::randn({3, 8});
  EXPECT_THROW(ops::rms_norm(x, torch::randn({3, 7}), torch::ones({8}), kEps, torch::kFloat), c10::Error);
  EXPECT_THROW(ops::rms_norm(x, torch::Tensor(), torch::ones({7}), kEps, torch::kFloat), c10::Error);
}

}  // namespace lmscale
