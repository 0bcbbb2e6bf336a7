// The multi-tensor AdamW kernel (src/kernels/fused_adamw.cu via ops/fused_adamw.h) against the fp64
// reference, and the reference against ATen's AdamW (FusedAdamW's fallback) on the CPU. Tolerances:
// fp32 params after a few steps stay within 1e-6 relative + lr·1e-6 absolute of fp64 (the update is
// one fp32 rounding of terms of size lr); the bf16 copy must equal the fp32 result rounded once.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "ops/fused_adamw.h"
#include "train/adamw.h"

namespace lmscale {
namespace {

struct State {
  std::vector<torch::Tensor> p, g, m, v, copies;
  torch::Tensor step;
};

// Odd sizes: single elements, numel % 4 != 0, one more than a kernel chunk (4096), and more tensors
// than one launch takes (32), so the scalar tail, chunk edges and launch split all run.
State make_state(torch::Device dev, bool with_copies) {
  State s;
  std::vector<int64_t> sizes = {1, 3, 7, 4097, 4096 * 3 + 5, 130};
  for (int i = 0; i < 30; ++i) sizes.push_back(17 + 8 * i);
  for (auto n : sizes) {
    auto opts = torch::TensorOptions().dtype(torch::kFloat).device(dev);
    s.p.push_back(torch::randn({n}, opts));
    s.g.push_back(torch::randn({n}, opts));
    s.m.push_back(torch::randn({n}, opts) * 0.1);
    s.v.push_back(torch::rand({n}, opts) * 0.01);
    s.copies.push_back(with_copies && n != 3 ? torch::full({n}, NAN, opts.dtype(torch::kBFloat16)) : torch::Tensor());
  }
  s.step = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(dev));
  return s;
}

State clone(const State& s) {
  State c;
  auto cl = [](const std::vector<torch::Tensor>& v) {
    std::vector<torch::Tensor> out;
    for (const auto& t : v) out.push_back(t.defined() ? t.clone() : t);
    return out;
  };
  c.p = cl(s.p), c.g = cl(s.g), c.m = cl(s.m), c.v = cl(s.v), c.copies = cl(s.copies);
  c.step = s.step.clone();
  return c;
}

void expect_close(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want, double rtol,
                  double atol, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    auto a = got[i].cpu().to(torch::kDouble), b = want[i].cpu().to(torch::kDouble);
    EXPECT_TRUE(torch::allclose(a, b, rtol, atol))
        << what << " " << i << " (numel " << a.numel() << ") max diff " << (a - b).abs().max().item<double>();
  }
}

ops::AdamWHyperparams hyper() {
  ops::AdamWHyperparams h;
  h.lr = 3e-3;
  h.weight_decay = 0.05;
  return h;
}

}  // namespace

TEST(AdamWReference, MatchesAtenAdamWOnCpu) {
  torch::manual_seed(11);
  State ref = make_state(torch::kCPU, /*with_copies=*/true);
  std::vector<torch::Tensor> params;
  for (const auto& p : ref.p) params.push_back(p.clone().requires_grad_(true));
  AdamWOptions o;
  o.lr = hyper().lr;
  o.weight_decay = hyper().weight_decay;
  FusedAdamW aten(params, o, /*use_kernel=*/false);
  // Same starting moments for both: AdamW state starts at zero.
  for (size_t i = 0; i < ref.p.size(); ++i) ref.m[i].zero_(), ref.v[i].zero_();
  for (int step = 0; step < 4; ++step) {
    for (size_t i = 0; i < params.size(); ++i) {
      auto g = torch::randn_like(ref.p[i]);
      ref.g[i].copy_(g);
      params[i].mutable_grad() = g.clone();
    }
    aten.step();
    ops::adamw_reference_step(ref.p, ref.g, ref.m, ref.v, ref.copies, ref.step, hyper());
    std::vector<torch::Tensor> got;
    for (const auto& p : params) got.push_back(p.detach());
    expect_close(got, ref.p, 1e-6, 1e-8, "param");
  }
  EXPECT_FALSE(aten.ran_kernel());
  for (size_t i = 0; i < ref.p.size(); ++i)
    if (ref.copies[i].defined()) {
      EXPECT_TRUE(torch::equal(ref.copies[i], ref.p[i].to(torch::kBFloat16)));
    }
}

TEST(FusedAdamWKernel, MatchesFp64ReferenceOnGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!ops::fused_adamw_available()) GTEST_SKIP() << "built without CUDA kernels";
  torch::manual_seed(12);
  State kern = make_state(torch::kCUDA, /*with_copies=*/true);
  State ref = clone(kern);
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < kern.g.size(); ++i) kern.g[i].normal_(), ref.g[i].copy_(kern.g[i]);
    ops::fused_adamw_step(kern.p, kern.g, kern.m, kern.v, kern.copies, kern.step, hyper());
    ops::adamw_reference_step(ref.p, ref.g, ref.m, ref.v, ref.copies, ref.step, hyper());
    expect_close(kern.p, ref.p, 1e-6, hyper().lr * 1e-5, "param");
    expect_close(kern.m, ref.m, 1e-6, 1e-7, "exp_avg");
    expect_close(kern.v, ref.v, 1e-6, 1e-9, "exp_avg_sq");
  }
  EXPECT_EQ(kern.step.item<float>(), 5.f);
  for (size_t i = 0; i < kern.p.size(); ++i) {
    if (!kern.copies[i].defined()) continue;
    // Poisoned with NaN before: every element must have been written, with the fp32 result rounded once.
    EXPECT_TRUE(torch::equal(kern.copies[i], kern.p[i].to(torch::kBFloat16))) << "copy " << i;
  }
}

TEST(FusedAdamWKernel, UnalignedViewsTakeTheScalarPath) {
  if (!torch::cuda::is_available() || !ops::fused_adamw_available()) GTEST_SKIP() << "needs CUDA and the kernels";
  torch::manual_seed(13);
  auto opts = torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA);
  // Views starting one element into their storage: not 16-byte aligned.
  auto base = [&](int64_t n) { return torch::randn({n + 1}, opts).narrow(0, 1, n); };
  State kern;
  for (int64_t n : {5, 4100}) {
    kern.p.push_back(base(n)), kern.g.push_back(base(n)), kern.m.push_back(base(n) * 0.1);
    kern.v.push_back(base(n).abs() * 0.01), kern.copies.push_back(torch::Tensor());
  }
  kern.step = torch::zeros({}, opts);
  State ref = clone(kern);
  ops::fused_adamw_step(kern.p, kern.g, kern.m, kern.v, kern.copies, kern.step, hyper());
  ops::adamw_reference_step(ref.p, ref.g, ref.m, ref.v, ref.copies, ref.step, hyper());
  expect_close(kern.p, ref.p, 1e-6, hyper().lr * 1e-5, "param");
}

TEST(FusedAdamWKernel, MatchesAtenFusedAdamWOverSteps) {
  if (!torch::cuda::is_available() || !ops::fused_adamw_available()) GTEST_SKIP() << "needs CUDA and the kernels";
  torch::manual_seed(14);
  std::vector<torch::Tensor> a, b;
  for (int64_t n : {3, 1000, 4099}) {
    auto t = torch::randn({n}, torch::kCUDA);
    a.push_back(t.clone().requires_grad_(true));
    b.push_back(t.clone().requires_grad_(true));
  }
  FusedAdamW kernel(a), aten(b, {}, /*use_kernel=*/false);
  for (int step = 0; step < 6; ++step) {
    for (size_t i = 0; i < a.size(); ++i) {
      auto g = torch::randn_like(a[i]);
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    kernel.step();
    aten.step();
    ASSERT_TRUE(kernel.ran_kernel());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-6, 1e-7))
          << "step " << step << " param " << i << " max diff " << (a[i] - b[i]).abs().max().item<double>();
  }
}

TEST(FusedAdamWKernel, RejectsMismatchedLists) {
  std::vector<torch::Tensor> one = {torch::zeros({2})};
  std::string why;
  EXPECT_FALSE(ops::fused_adamw_accepts(one, one, one, {}, {torch::Tensor()}, &why));
  EXPECT_NE(why.find("differ in length"), std::string::npos) << why;
  EXPECT_FALSE(ops::fused_adamw_accepts(one, one, one, one, {torch::Tensor()}, &why));  // CPU or no kernels
  EXPECT_FALSE(why.empty());
}

}  // namespace lmscale
