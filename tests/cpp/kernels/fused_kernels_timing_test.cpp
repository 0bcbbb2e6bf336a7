// Timings of the fused kernels against the ATen ops they replace, at the activation shapes of a
// train step (batch 4 × context 512 rows; small: d 768, d_ff 3072; xl: d 1600, d_ff 6400; vocab
// 10 000; bf16 autocast dtypes). Not a check — speed is never asserted — so the test is disabled and
// run by hand on a GPU (docs/fused_kernels.md):
//   lmscale_tests --gtest_also_run_disabled_tests --gtest_filter='FusedKernelTiming.*'
// Each case is captured 20 times into a CUDA graph and replayed, so host launch and autograd costs
// drop out; backward = (forward + backward) − forward. GB/s = the bytes each fused kernel must move
// (docs/fused_kernels.md) over its time: the fused and the ATen row use the same byte count, so the
// ATen row's figure is "effective".
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <functional>

#include "ops/fused_cross_entropy.h"
#include "ops/fused_rmsnorm.h"
#include "ops/fused_swiglu.h"

#ifdef LMSCALE_HAS_KERNELS
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace lmscale {
namespace {

#ifdef LMSCALE_HAS_KERNELS
// Mean µs of one call of f, from graph replays of 20 calls.
double time_us(const std::function<void()>& f) {
  constexpr int kCalls = 20, kReplays = 20;
  auto side = c10::cuda::getStreamFromPool();
  c10::cuda::CUDAStreamGuard guard(side);
  for (int i = 0; i < 3; ++i) f();
  side.synchronize();
  at::cuda::CUDAGraph graph;
  graph.capture_begin();
  for (int i = 0; i < kCalls; ++i) f();
  graph.capture_end();
  graph.replay();
  side.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kReplays; ++i) graph.replay();
  side.synchronize();
  const std::chrono::duration<double, std::micro> dt = std::chrono::steady_clock::now() - t0;
  return dt.count() / (kCalls * kReplays);
}

void report(const char* kernel, const char* shape, const char* path, double fwd_us, double fwdbwd_us,
            double fwd_bytes, double bwd_bytes) {
  const double bwd_us = fwdbwd_us - fwd_us;
  std::printf("| %s | %s | %s | %.1f | %.0f | %.1f | %.0f |\n", kernel, shape, path, fwd_us, fwd_bytes / fwd_us / 1e3,
              bwd_us, bwd_bytes / bwd_us / 1e3);
}
#endif

}  // namespace

TEST(FusedKernelTiming, DISABLED_AgainstTheAtenOps) {
#ifdef LMSCALE_HAS_KERNELS
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t rows = 4 * 512, vocab = 10000;
  auto f32 = torch::TensorOptions().device(torch::kCUDA), bf16 = f32.dtype(torch::kBFloat16);
  std::printf("| kernel | shape | path | fwd µs | fwd GB/s | bwd µs | bwd GB/s |\n|---|---|---|---|---|---|---|\n");
  struct Size {
    const char* name;
    int64_t d, ff;
  };
  for (const Size& s : {Size{"small", 768, 3072}, Size{"xl", 1600, 6400}}) {
    char shape[64];
    // Residual add + RMSNorm: x fp32 (the stream), r bf16 (a sublayer output), y bf16.
    std::snprintf(shape, sizeof shape, "%s %lld×%lld", s.name, (long long)rows, (long long)s.d);
    auto x = torch::randn({rows, s.d}, f32).requires_grad_(true);
    auto r = torch::randn({rows, s.d}, bf16).requires_grad_(true);
    auto gain = torch::ones({s.d}, f32).requires_grad_(true);
    auto dh = torch::randn({rows, s.d}, f32), dy = torch::randn({rows, s.d}, bf16);
    const double n = static_cast<double>(rows * s.d);
    auto fused_norm = [&] { return ops::rms_norm(x, r, gain, 1e-5, torch::kBFloat16); };
    auto aten_norm = [&] {
      auto h = x + r;
      return std::make_pair(h, at::rms_norm(h, {s.d}, gain, 1e-5).to(torch::kBFloat16));
    };
    for (int fused = 1; fused >= 0; --fused) {
      auto run = [&](bool bwd) {
        std::pair<torch::Tensor, torch::Tensor> out;
        {
          std::optional<torch::NoGradGuard> ng;
          if (!bwd) ng.emplace();
          out = fused ? fused_norm() : aten_norm();
        }
        if (bwd) torch::autograd::grad({out.first, out.second}, {x, r, gain}, {dh, dy});
      };
      report("residual add + RMSNorm", shape, fused ? "fused" : "ATen", time_us([&] { run(false); }),
             time_us([&] { run(true); }), n * (4 + 2 + 4 + 2), n * (4 + 2 + 4 + 4 + 2));
    }
    // SwiGLU gate, bf16.
    std::snprintf(shape, sizeof shape, "%s %lld×%lld", s.name, (long long)rows, (long long)s.ff);
    auto a = torch::randn({rows, s.ff}, bf16).requires_grad_(true), b = torch::randn({rows, s.ff}, bf16).requires_grad_(true);
    auto dout = torch::randn({rows, s.ff}, bf16);
    const double m = static_cast<double>(rows * s.ff);
    for (int fused = 1; fused >= 0; --fused) {
      auto run = [&](bool bwd) {
        torch::Tensor out;
        {
          std::optional<torch::NoGradGuard> ng;
          if (!bwd) ng.emplace();
          out = fused ? ops::swiglu(a, b) : torch::silu(a) * b;
        }
        if (bwd) torch::autograd::grad({out}, {a, b}, {dout});
      };
      report("SwiGLU gate", shape, fused ? "fused" : "ATen", time_us([&] { run(false); }), time_us([&] { run(true); }),
             m * 6, m * 10);
    }
  }
  // Cross-entropy over bf16 logits (the LM head's output under autocast).
  auto z = torch::randn({rows, vocab}, bf16).requires_grad_(true);
  auto t = torch::randint(vocab, {rows}, f32.dtype(torch::kLong));
  const double v = static_cast<double>(rows * vocab);
  for (int fused = 1; fused >= 0; --fused) {
    auto run = [&](bool bwd) {
      torch::Tensor loss;
      {
        std::optional<torch::NoGradGuard> ng;
        if (!bwd) ng.emplace();
        loss = fused ? ops::cross_entropy(z, t) : ops::cross_entropy(z, t);
      }
      if (bwd) torch::autograd::grad({loss}, {z});
    };
    report("cross-entropy", "2048×10000", fused ? "fused" : "ATen", time_us([&] { run(false); }),
           time_us([&] { run(true); }), v * 2, v * 4);
  }
#else
  GTEST_SKIP() << "built without the CUDA kernels";
#endif
}

}  // namespace lmscale
