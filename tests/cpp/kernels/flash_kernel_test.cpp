// The FlashAttention-2 CUDA kernels against the fp64 reference on fresh random inputs, for every built
// (dtype, head dim, causal) and lengths that are not tile multiples. The pass bar is relative: the
// kernel's max error vs fp64 must be within 3x of plain PyTorch attention's error in the same dtype
// (plus a floor of a quarter ulp at 1.0, for cases where plain attention is exact). Skipped without a GPU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "model/attention.h"
#include "model/config.h"
#include "model/transformer.h"
#include "ops/flash_attention.h"
#include "ops/flash_reference.h"

#ifdef LMSCALE_HAS_KERNELS
#include <ATen/cuda/CUDAContext.h>

#include "kernels/flash_params.h"
#endif
#include "kernels/flash_head_dims.h"
#include "kernels/flash_variants.h"

namespace lmscale {
namespace {

constexpr auto kHeadDims = kernels::BuiltHeadDims::kValues;  // the built list
constexpr int kSeqLens[] = {1, 97, 257, 1025};

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

double floor_for(torch::ScalarType dt) { return dt == torch::kBFloat16 ? 0.25 * 0.0078125 : 0.25 * 0.0009765625; }

#define SKIP_WITHOUT_GPU() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

#ifdef LMSCALE_HAS_KERNELS
// Calls the kernels directly (not through ops/) so every output and workspace can be NaN-poisoned
// first: a kernel that skips a row or relies on zeroed memory then fails loudly.
struct KernelRun {
  torch::Tensor o, L, dq, dk, dv;
};

kernels::FlashParams params_for(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal) {
  kernels::FlashParams p;
  auto set = [](const torch::Tensor& t, int64_t& bs, int64_t& hs, int64_t& rs) {
    bs = t.stride(0), hs = t.stride(1), rs = t.stride(2);
  };
  p.q = q.data_ptr(), p.k = k.data_ptr(), p.v = v.data_ptr();
  set(q, p.q_batch_stride, p.q_head_stride, p.q_row_stride);
  set(k, p.k_batch_stride, p.k_head_stride, p.k_row_stride);
  set(v, p.v_batch_stride, p.v_head_stride, p.v_row_stride);
  set(q, p.o_batch_stride, p.o_head_stride, p.o_row_stride);
  set(q, p.do_batch_stride, p.do_head_stride, p.do_row_stride);
  set(q, p.dq_batch_stride, p.dq_head_stride, p.dq_row_stride);
  set(k, p.dk_batch_stride, p.dk_head_stride, p.dk_row_stride);
  set(v, p.dv_batch_stride, p.dv_head_stride, p.dv_row_stride);
  p.batch = q.size(0), p.heads = q.size(1), p.seqlen_q = q.size(2), p.seqlen_k = k.size(2), p.head_dim = q.size(3);
  p.scale = 1.f / std::sqrt(static_cast<float>(p.head_dim));
  p.is_causal = causal;
  p.dtype = q.scalar_type() == torch::kHalf ? kernels::FlashDtype::kFP16 : kernels::FlashDtype::kBF16;
  return p;
}

// The kernel family (forward and backward) for run_kernels: every path is checked where it can run, so on
// an sm_90 device kHopper runs the sm_90a forward and backward at every built head dim of HopperHeadDims.
constexpr kernels::FlashPath kPaths[] = {kernels::FlashPath::kMmaSync, kernels::FlashPath::kHopper};
const char* path_name(kernels::FlashPath p) { return p == kernels::FlashPath::kHopper ? "hopper" : "mma.sync"; }

// True when the forced Hopper forward can run this config here (sm_90 device, dtype, head dim, strides);
// the path's own error names the reason otherwise.
bool hopper_runs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal) {
  auto p = params_for(q, k, v, causal);
  auto o = torch::empty_like(q);
  auto L = torch::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(torch::kFloat));
  p.o = o.data_ptr(), p.lse = L.data_ptr<float>();
  p.path = kernels::FlashPath::kHopper;
  try {
    kernels::run_flash_fwd(p, at::cuda::getCurrentCUDAStream().stream());
    return true;
  } catch (const std::runtime_error& e) {
    if (std::string(e.what()).find("Hopper path was forced") == std::string::npos) throw;
    return false;
  }
}

KernelRun run_kernels(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                      const torch::Tensor& dout, bool causal, kernels::FlashPath path = kernels::FlashPath::kAuto) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto f32 = q.options().dtype(torch::kFloat);
  KernelRun r;
  r.o = torch::full_like(q, nan);
  r.L = torch::full({q.size(0), q.size(1), q.size(2)}, nan, f32);
  r.dq = torch::full_like(q, nan), r.dk = torch::full_like(k, nan), r.dv = torch::full_like(v, nan);
  auto dq_accum = torch::full(q.sizes(), nan, f32), dsum = torch::full_like(r.L, nan);
  auto p = params_for(q, k, v, causal);
  p.o = r.o.data_ptr(), p.lse = r.L.data_ptr<float>(), p.dout = dout.data_ptr();
  p.dq = r.dq.data_ptr(), p.dk = r.dk.data_ptr(), p.dv = r.dv.data_ptr();
  p.dq_accum = dq_accum.data_ptr<float>(), p.dsum = dsum.data_ptr<float>();
  p.path = path;
  auto stream = at::cuda::getCurrentCUDAStream().stream();
  kernels::run_flash_fwd(p, stream);
  kernels::run_flash_bwd(p, stream);
  torch::cuda::synchronize();
  return r;
}
#endif

// Plain attention in dtype dt (what a PyTorch user gets), with autograd for the gradient baseline.
struct PlainRun {
  torch::Tensor o, dq, dk, dv;
};
PlainRun plain(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& dout,
               bool causal) {
  auto q1 = q.detach().clone().requires_grad_(), k1 = k.detach().clone().requires_grad_(),
       v1 = v.detach().clone().requires_grad_();
  auto o = naive_attention(q1, k1, v1, causal);
  o.backward(dout);
  return {o.detach(), q1.grad(), k1.grad(), v1.grad()};
}

TEST(FlashKernel, MatchesFp64ReferenceAcrossDtypesHeadDimsAndTails) {
  SKIP_WITHOUT_GPU();
#ifndef LMSCALE_HAS_KERNELS
  GTEST_SKIP() << "built without CUDA kernels";
#else
  int checked = 0;
  for (auto dt : {torch::kBFloat16, torch::kHalf}) {
    for (int d : kHeadDims) {
      if (!ops::flash_kernel_available(dt, d)) continue;
      for (bool causal : {false, true}) {
        for (int n : kSeqLens) {
          auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(dt);
          const int64_t B = 2, H = 3;
          auto q = torch::randn({B, H, n, d}, opts), k = torch::randn({B, H, n, d}, opts),
               v = torch::randn({B, H, n, d}, opts), dout = torch::randn({B, H, n, d}, opts);
          auto to64 = [](const torch::Tensor& t) { return t.to(torch::kDouble); };
          auto [o_ref, L_ref] = ops::flash_reference_forward(to64(q), to64(k), to64(v), causal);
          auto [dq_ref, dk_ref, dv_ref] =
              ops::flash_reference_backward(to64(q), to64(k), to64(v), o_ref, L_ref, to64(dout), causal);
          auto base = plain(q, k, v, dout, causal);
          for (auto path : kPaths) {
            if (path == kernels::FlashPath::kHopper && !hopper_runs(q, k, v, causal)) continue;
            auto run = run_kernels(q, k, v, dout, causal, path);
            const double fl = floor_for(dt);
            const std::string what = std::string(dt == torch::kHalf ? "fp16" : "bf16") + " D=" + std::to_string(d) +
                                     " N=" + std::to_string(n) + (causal ? " causal " : " ") + path_name(path);
            auto check = [&](const char* name, const torch::Tensor& got, const torch::Tensor& ref,
                             const torch::Tensor& baseline) {
              const double err = max_diff(got, ref), bar = 3 * max_diff(baseline, ref) + fl;
              EXPECT_FALSE(std::isnan(err)) << what << " " << name << " has NaN (unwritten output?)";
              EXPECT_LE(err, bar) << what << " " << name << ": kernel err " << err << " vs bar " << bar;
            };
            check("O", run.o, o_ref, base.o);
            // L has no plain-attention counterpart in dtype; fp32 L must match to fp32-ish accuracy.
            EXPECT_LT(max_diff(run.L, L_ref), 2e-3) << what << " L";
            check("dQ", run.dq, dq_ref, base.dq);
            check("dK", run.dk, dk_ref, base.dk);
            check("dV", run.dv, dv_ref, base.dv);
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 0) << "no (dtype, head dim) was built";
#endif
}

// The sm_90a forward (src/kernels/hopper/) on the lengths and layouts its TMA tiles must get right:
// lengths that are not tile multiples (zero-filled tails), heads inside rows (a fused QKV projection's
// (B, N, H, D) viewed as (B, H, N, D)) and padded rows. O and L are NaN-poisoned before each run.
TEST(FlashKernel, HopperForwardMatchesFp64AcrossLengthsAndLayouts) {
  SKIP_WITHOUT_GPU();
#ifndef LMSCALE_HAS_KERNELS
  GTEST_SKIP() << "built without CUDA kernels";
#else
  int checked = 0;
  for (auto dt : {torch::kBFloat16, torch::kHalf}) {
    for (int d : kernels::HopperHeadDims::kValues) {
      if (!ops::flash_kernel_available(dt, d)) continue;
      for (bool causal : {false, true}) {
        for (int n : {1, 17, 130, 1000, 4099}) {  // causal: FwdShort up to kFwdShortKeys, the shipped tile at 4099
          for (int layout = 0; layout < 3; ++layout) {
            if (layout > 0 && n != 130 && n != 1000) continue;  // layouts on two lengths keep the test short
            auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(dt);
            const int64_t B = 2, H = 3;
            auto make = [&] {
              if (layout == 1) return torch::randn({B, n, H, d}, opts).transpose(1, 2);  // heads inside rows
              if (layout == 2) return torch::randn({B, H, n, d + 24}, opts).narrow(3, 0, d);  // padded rows
              return torch::randn({B, H, n, d}, opts);
            };
            auto q = make(), k = make(), v = make();
            if (!hopper_runs(q, k, v, causal)) GTEST_SKIP() << "the Hopper forward cannot run here (not sm_90?)";
            auto to64 = [](const torch::Tensor& t) { return t.to(torch::kDouble); };
            auto [o_ref, L_ref] = ops::flash_reference_forward(to64(q), to64(k), to64(v), causal);
            auto base = naive_attention(q, k, v, causal);
            const double nan = std::numeric_limits<double>::quiet_NaN();
            auto o = torch::full_like(q, nan);
            auto L = torch::full({B, H, n}, nan, opts.dtype(torch::kFloat));
            auto p = params_for(q, k, v, causal);
            p.o = o.data_ptr(), p.lse = L.data_ptr<float>();
            p.o_batch_stride = o.stride(0), p.o_head_stride = o.stride(1), p.o_row_stride = o.stride(2);
            p.path = kernels::FlashPath::kHopper;
            kernels::run_flash_fwd(p, at::cuda::getCurrentCUDAStream().stream());
            torch::cuda::synchronize();
            const std::string what = std::string(dt == torch::kHalf ? "fp16" : "bf16") + " D=" + std::to_string(d) +
                                     " N=" + std::to_string(n) + " layout " + std::to_string(layout) +
                                     (causal ? " causal" : "");
            const double err = max_diff(o, o_ref), bar = 3 * max_diff(base, o_ref) + floor_for(dt);
            EXPECT_FALSE(std::isnan(err)) << what << " O has NaN (unwritten output?)";
            EXPECT_LE(err, bar) << what << " O: kernel err " << err << " vs bar " << bar;
            EXPECT_LT(max_diff(L, L_ref), 2e-3) << what << " L";
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 0) << "no Hopper (dtype, head dim) was built";
#endif
}

TEST(FlashKernel, AutogradOpOnTransposedViewsMatchesReference) {
  SKIP_WITHOUT_GPU();
  if (!ops::flash_kernel_available(torch::kBFloat16, 64)) GTEST_SKIP() << "bf16 D=64 not built";
  // (B, T, H, D) projections viewed as (B, H, T, D): the strides the model passes.
  auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const int64_t B = 2, T = 200, H = 4, D = 64;
  auto mk = [&] { return torch::randn({B, T, H, D}, opts).transpose(1, 2).detach().requires_grad_(); };
  auto q = mk(), k = mk(), v = mk();
  auto dout = torch::randn({B, H, T, D}, opts);
  auto o = ops::flash_attention(q, k, v, true);
  o.backward(dout);
  auto to64 = [](const torch::Tensor& t) { return t.detach().to(torch::kDouble); };
  auto [o_ref, L_ref] = ops::flash_reference_forward(to64(q), to64(k), to64(v), true);
  auto [dq_ref, dk_ref, dv_ref] =
      ops::flash_reference_backward(to64(q), to64(k), to64(v), o_ref, L_ref, to64(dout), true);
  auto base = plain(q.detach(), k.detach(), v.detach(), dout, true);
  const double fl = floor_for(torch::kBFloat16);
  EXPECT_LE(max_diff(o, o_ref), 3 * max_diff(base.o, o_ref) + fl);
  EXPECT_LE(max_diff(q.grad(), dq_ref), 3 * max_diff(base.dq, dq_ref) + fl);
  EXPECT_LE(max_diff(k.grad(), dk_ref), 3 * max_diff(base.dk, dk_ref) + fl);
  EXPECT_LE(max_diff(v.grad(), dv_ref), 3 * max_diff(base.dv, dv_ref) + fl);
  // fp32 inputs run the fp32 kernels: output dtype fp32, at least bf16's accuracy (fp32-class bars:
  // tests/python/test_flash_fp32_cuda.py).
  auto q32 = q.detach().to(torch::kFloat), k32 = k.detach().to(torch::kFloat), v32 = v.detach().to(torch::kFloat);
  auto [o32, L32] = ops::flash_attention_forward(q32, k32, v32, true);
  EXPECT_EQ(o32.scalar_type(), torch::kFloat);
  EXPECT_LE(max_diff(o32, o_ref), 3 * max_diff(base.o, o_ref) + fl);
}

TEST(FlashKernel, ModelWithFlashBackendMatchesNaive) {
  SKIP_WITHOUT_GPU();
  if (!ops::flash_kernel_available(torch::kBFloat16, model_config("tiny").d_head()))
    GTEST_SKIP() << "tiny model's head dim not built";
  torch::manual_seed(0);
  auto cfg = model_config("tiny");
  cfg.attention = AttentionBackend::Naive;
  TransformerLM naive_model(cfg);
  cfg.attention = AttentionBackend::Flash;
  TransformerLM flash_model(cfg);
  {
    torch::NoGradGuard g;
    auto src = naive_model->parameters(), dst = flash_model->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  naive_model->to(torch::kCUDA);
  flash_model->to(torch::kCUDA);
  const int64_t T = std::min<int64_t>(cfg.context_length, 100);
  auto tokens = torch::randint(cfg.vocab_size, {2, T}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kLong));
  auto targets = torch::randint(cfg.vocab_size, {2, T}, tokens.options());
  // fp32 model: the flash backend runs the fp32 kernels; the bars are bf16's, from when it rounded to bf16.
  auto loss_naive = cross_entropy(naive_model(tokens), targets);
  auto loss_flash = cross_entropy(flash_model(tokens), targets);
  loss_naive.backward();
  loss_flash.backward();
  EXPECT_NEAR(loss_flash.item<double>(), loss_naive.item<double>(), 2e-2 * std::abs(loss_naive.item<double>()));
  auto pn = naive_model->parameters(), pf = flash_model->parameters();
  for (size_t i = 0; i < pn.size(); ++i) {
    auto a = pn[i].grad().flatten().to(torch::kDouble), b = pf[i].grad().flatten().to(torch::kDouble);
    const double cos = (a * b).sum().item<double>() / (a.norm().item<double>() * b.norm().item<double>() + 1e-30);
    EXPECT_GT(cos, 0.99) << "parameter " << i;
  }
}

}  // namespace
}  // namespace lmscale
