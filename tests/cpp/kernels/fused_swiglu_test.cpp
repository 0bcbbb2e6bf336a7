// The fused SwiGLU gate op (ops/fused_swiglu.h): the reference against the formulas the kernels
// implement (forward and both gradients) on the CPU, and the CUDA kernels against the reference run
// in fp64: F = 1000 (16-byte vectors; not a multiple of 128), F = 999 (element path), and a, b as
// column blocks of one wider matrix (row-strided inputs), with the allocator cache poisoned.
// Tolerances relative to each tensor's max: fp32 1e-5 (fast exp); bf16: one rounding, 1e-2.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/fused_kernel_checks.h"
#include "ops/fused_swiglu.h"

namespace lmscale {

using testing::max_rel;

TEST(SwiGluReference, MatchesTheKernelsFormulas) {
  torch::manual_seed(61);
  auto a = (3 * torch::randn({4, 33}, torch::kDouble)).requires_grad_(true);
  auto b = torch::randn({4, 33}, torch::kDouble).requires_grad_(true);
  auto dout = torch::randn({4, 33}, torch::kDouble);
  auto out = ops::swiglu(a, b);  // the CPU runs the reference
  auto s = torch::sigmoid(a.detach());
  EXPECT_LT(max_rel(out, a.detach() * s * b.detach()), 1e-14);
  auto g = torch::autograd::grad({out}, {a, b}, {dout});
  EXPECT_LT(max_rel(g[0], dout * b.detach() * s * (1 + a.detach() * (1 - s))), 1e-13);
  EXPECT_LT(max_rel(g[1], dout * a.detach() * s), 1e-13);
}

TEST(SwiGluKernel, MatchesFp64ReferenceForwardAndBackward) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    for (int64_t F : {1000, 999}) {
      for (bool strided : {false, true}) {
        torch::manual_seed(62);
        auto opts = torch::TensorOptions().dtype(dtype).device(torch::kCUDA);
        torch::Tensor a, b;
        if (strided) {  // [a | b] as one (2, 7, 2F) GEMM output would give them
          auto ab = (2 * torch::randn({2, 7, 2 * F}, opts)).requires_grad_(true);
          auto parts = ab.chunk(2, -1);
          a = parts[0], b = parts[1];
        } else {
          a = (2 * torch::randn({2, 7, F}, opts)).requires_grad_(true);
          b = torch::randn({2, 7, F}, opts).requires_grad_(true);
        }
        ASSERT_TRUE(ops::swiglu_uses_kernel(a, b));
        testing::poison_cuda_cache();
        auto out = ops::swiglu(a, b);
        auto a64 = a.detach().to(torch::kDouble).requires_grad_(true);
        auto b64 = b.detach().to(torch::kDouble).requires_grad_(true);
        auto ref = ops::swiglu(a64, b64);
        const double tol = dtype == torch::kFloat ? 1e-5 : 1e-2;
        const std::string what = std::string(c10::toString(dtype)) + " F " + std::to_string(F) +
                                 (strided ? " strided" : "");
        EXPECT_TRUE(out.is_contiguous() && out.scalar_type() == dtype) << what;
        EXPECT_LT(max_rel(out, ref), tol) << what;
        auto dout = torch::randn({2, 7, F}, opts);
        testing::poison_cuda_cache();
        auto g = torch::autograd::grad({out}, {a, b}, {dout});
        auto rg = torch::autograd::grad({ref}, {a64, b64}, {dout.to(torch::kDouble)});
        EXPECT_LT(max_rel(g[0], rg[0]), tol) << what << " da";
        EXPECT_LT(max_rel(g[1], rg[1]), tol) << what << " db";
      }
    }
  }
}

TEST(SwiGlu, RejectsMismatchedInputs) {
  EXPECT_THROW(ops::swiglu(torch::randn({3, 8}), torch::randn({3, 7})), c10::Error);
  EXPECT_THROW(ops::swiglu(torch::randn({3, 8}), torch::randn({3, 8}, torch::kDouble)), c10::Error);
}

}  // namespace lmscale
