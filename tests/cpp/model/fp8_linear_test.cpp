// The FP8 Linear (model/fp8_linear.h) on the CPU, where its GEMMs are emulated in fp32: forward, input
// gradient and weight gradient against an fp64 reference that quantizes the same operands from the
// definition (support/fp8_reference.h): e4m3 X and W, e5m2 dY, exact power-of-two scales. Then the
// FP8 error against the unquantized product stays within what 3 (e4m3) and 2 (e5m2) mantissa bits
// allow, Linear's fp8 switch takes this path only under bf16 autocast, and the training step refuses
// fp8 where there is no Hopper GPU. On a GPU: cuBLASLt's FP8 GEMMs against the same reference.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/autocast.h"
#include "kernels/fused_kernel_checks.h"
#include "model/fp8_linear.h"
#include "model/layers.h"
#include "support/fp8_reference.h"
#include "train/training_step.h"

namespace lmscale {
namespace {

using testing::kE4M3;
using testing::kE5M2;
using testing::max_rel;
using testing::reference_dequantized;

struct Result {
  torch::Tensor y, dx, dw_a, dw_b;
};

// x (2, 24, 64) through two row-stacked weights a (48, 64), b (32, 64): one (80, 64) GEMM operand.
Result run(const torch::Tensor& x0, const torch::Tensor& wa0, const torch::Tensor& wb0, const torch::Tensor& dy,
           torch::Device dev) {
  auto x = x0.to(dev).requires_grad_(true);
  auto wa = wa0.to(dev).requires_grad_(true), wb = wb0.to(dev).requires_grad_(true);
  auto copy = torch::cat({wa0, wb0}, 0).to(torch::kBFloat16).to(dev);
  auto y = linear_fp8(x, copy, {wa, wb});
  y.backward(dy.to(dev));
  return {y.detach().cpu(), x.grad().cpu(), wa.grad().cpu(), wb.grad().cpu()};
}

struct Case {
  torch::Tensor x, wa, wb, dy;
  torch::Tensor y_ref, dx_ref, dw_ref;  // from the definition (fp64)
  torch::Tensor y_exact, dx_exact, dw_exact;  // unquantized bf16 operands (fp64)
};

Case make_case() {
  torch::manual_seed(83);
  Case c;
  c.x = torch::randn({2, 24, 64});
  c.x.index_put_({0, 3}, c.x.index({0, 3}) * 40);  // an outlier row: the scale follows the amax
  c.wa = torch::randn({48, 64}) * 0.05, c.wb = torch::randn({32, 64}) * 0.2;
  c.dy = torch::randn({2, 24, 80}).to(torch::kBFloat16) * 1e-3;
  auto xb = c.x.to(torch::kBFloat16).reshape({-1, 64}), wb16 = torch::cat({c.wa, c.wb}).to(torch::kBFloat16);
  auto gb = c.dy.reshape({-1, 80});
  auto qx = reference_dequantized(xb, kE4M3), qw = reference_dequantized(wb16, kE4M3);
  auto qg = reference_dequantized(gb, kE5M2);
  c.y_ref = qx.mm(qw.t()).view({2, 24, 80});
  c.dx_ref = qg.mm(qw).view({2, 24, 64});
  c.dw_ref = qg.t().mm(qx);
  auto ex = xb.to(torch::kDouble), ew = wb16.to(torch::kDouble), eg = gb.to(torch::kDouble);
  c.y_exact = ex.mm(ew.t()).view({2, 24, 80});
  c.dx_exact = eg.mm(ew).view({2, 24, 64});
  c.dw_exact = eg.t().mm(ex);
  return c;
}

TEST(Fp8Linear, CpuMatchesTheQuantizedReference) {
  const Case c = make_case();
  const Result r = run(c.x, c.wa, c.wb, c.dy, torch::kCPU);
  EXPECT_EQ(r.y.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(r.dx.scalar_type(), torch::kFloat);  // x's dtype
  EXPECT_EQ(r.dw_a.scalar_type(), torch::kFloat);
  // Same quantized operands, fp32 sums of exact products: y and dx differ from the reference by
  // their bf16 rounding (2^-8 relative), dw (fp32 out) by fp32 summation only.
  EXPECT_LT(max_rel(r.y, c.y_ref), 1.0 / 256);
  EXPECT_LT(max_rel(r.dx, c.dx_ref), 1.0 / 256);
  auto dw = torch::cat({r.dw_a, r.dw_b});
  EXPECT_LT(max_rel(dw, c.dw_ref), 1e-5);
}

TEST(Fp8Linear, ErrorAgainstTheUnquantizedProductIsFp8Sized) {
  // Each operand element carries at most 2^-4 (e4m3) or 2^-3 (e5m2) relative error, and the errors
  // of a K-term sum partly cancel; the bound is one ulp of the coarser operand.
  const Case c = make_case();
  const Result r = run(c.x, c.wa, c.wb, c.dy, torch::kCPU);
  EXPECT_LT(max_rel(r.y, c.y_exact), 1.0 / 16);
  EXPECT_LT(max_rel(r.dx, c.dx_exact), 1.0 / 8);
  EXPECT_LT(max_rel(torch::cat({r.dw_a, r.dw_b}), c.dw_exact), 1.0 / 8);
}

TEST(Fp8Linear, LinearTakesTheFp8PathUnderBf16AutocastOnly) {
  torch::manual_seed(84);
  Linear lin(64, 32);
  auto x = torch::randn({4, 16, 64});
  lin->fp8 = true;
  auto direct = linear_fp8(x, lin->weight, {lin->weight}).detach();
  torch::Tensor y_fp8, y_plain;
  {
    AutocastScope autocast(torch::kCPU, torch::kFloat8_e4m3fn);  // the fp8 precision: bf16 autocast
    y_fp8 = lin(x).detach();
    EXPECT_TRUE(lin->uses_fp8(x));
    EXPECT_FALSE(lin->uses_fp8(torch::randn({3, 64})));  // 3 tokens: not a multiple of 16, bf16 path
  }
  EXPECT_TRUE(torch::equal(y_fp8, direct));
  y_plain = lin(x).detach();  // no autocast: fp32, not FP8
  EXPECT_EQ(y_plain.scalar_type(), torch::kFloat);
  EXPECT_FALSE(lin->uses_fp8(x));
}

TEST(Fp8Linear, SwiGluCastsTheInputOfW1AndW3Once) {
  // W1 and W3 read one input: SwiGLU quantizes it once (quantize_fp8_input) and both GEMMs take that
  // copy. Same bytes as each layer casting it itself, so the output and every gradient are bit-identical
  // to the block written with one linear_fp8 call per layer.
  torch::manual_seed(85);
  SwiGLU ffn(64, 96);
  for (auto* lin : {ffn->w1.get(), ffn->w2.get(), ffn->w3.get()}) lin->fp8 = true;
  auto x = torch::randn({4, 16, 64}, torch::requires_grad());
  {
    AutocastScope autocast(torch::kCPU, torch::kFloat8_e4m3fn);
    ASSERT_TRUE(ffn->w1->uses_fp8(x) && ffn->w3->uses_fp8(x)) << "the shared cast is not exercised";
  }
  auto loss_and_grads = [&](auto&& block) {
    AutocastScope autocast(torch::kCPU, torch::kFloat8_e4m3fn);
    auto y = block(x);
    auto g = torch::autograd::grad({y.to(torch::kFloat).pow(2).sum()},
                                   {x, ffn->w1->weight, ffn->w2->weight, ffn->w3->weight});
    g.insert(g.begin(), y.detach());
    return g;
  };
  const auto shared = loss_and_grads([&](const torch::Tensor& in) { return ffn(in); });
  const auto apart = loss_and_grads([&](const torch::Tensor& in) {
    auto xc = in.to(torch::kBFloat16);
    auto a = linear_fp8(xc, ffn->w1->weight, {ffn->w1->weight});
    auto b = linear_fp8(xc, ffn->w3->weight, {ffn->w3->weight});
    return ffn->w2(torch::silu(a) * b);
  });
  ASSERT_EQ(shared.size(), apart.size());
  for (size_t i = 0; i < shared.size(); ++i) EXPECT_TRUE(torch::equal(shared[i], apart[i])) << "output/gradient " << i;
  const auto q3 = quantize_fp8_input(torch::randn({3, 96}));
  EXPECT_THROW(ffn->w2->forward_fp8(torch::randn({3, 96}), &q3, {}), c10::Error)
      << "3 tokens do not take the FP8 path: forward_fp8 must refuse";
}

TEST(Fp8Linear, TheStepRefusesFp8WithoutAHopperGpu) {
  StepSetup s;
  s.precision = torch::kFloat8_e4m3fn;
  try {
    validate(s);
    FAIL() << "fp8 on the CPU must be refused";
  } catch (const c10::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("Hopper"), std::string::npos) << what;
    EXPECT_NE(what.find("bf16"), std::string::npos) << what;
  }
}

TEST(Fp8LinearGpu, CublasLtMatchesTheQuantizedReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Case c = make_case();
  const Result r = run(c.x, c.wa, c.wb, c.dy, torch::kCUDA);
  // Forward with fast accumulation (partial sums kept at reduced precision): looser than the CPU's.
  EXPECT_LT(max_rel(r.y, c.y_ref), 1e-2);
  EXPECT_LT(max_rel(r.dx, c.dx_ref), 1.0 / 256);
  // dW (fp32 out, no fast accumulation): Hopper's FP8 tensor cores keep their partial sums at reduced
  // precision (about 14 mantissa bits, not fp32's 23) before cuBLASLt promotes them into fp32, so the GPU
  // is not held to the CPU's fp32-summation bound; 2^-10 (measured on an H100: 4.0e-4).
  EXPECT_LT(max_rel(torch::cat({r.dw_a, r.dw_b}), c.dw_ref), 1.0 / 1024);
}

}  // namespace
}  // namespace lmscale
