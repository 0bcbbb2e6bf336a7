// The tiled FlashAttention-2 reference and the CPU path of the lmscale ops against plain attention in
// fp64: O, L and dQ/dK/dV, causal and not, odd lengths that cross reference tiles, 2-D to 5-D inputs,
// Nq != Nk, the dispatcher-registered ops, and the input checks' messages. Every mask and layout (both
// causal alignments, windows, grouped K/V heads, packed batches) against masks written out entry by entry:
// flash_reference_masks_test.cpp.
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/attention.h"
#include "ops/flash_attention.h"
#include "ops/flash_reference.h"
#include "support/expect_error.h"

namespace lmscale::ops {
namespace {

struct Case {
  std::vector<int64_t> lead;  // leading batch/head dims
  int64_t nq, nk, d;
  bool causal;
};

std::vector<int64_t> shape(const Case& c, int64_t n) {
  auto s = c.lead;
  s.push_back(n);
  s.push_back(c.d);
  return s;
}

std::string describe(const Case& c) {
  std::string s = "lead=" + std::to_string(c.lead.size()) + "d Nq=" + std::to_string(c.nq) +
                  " Nk=" + std::to_string(c.nk) + " D=" + std::to_string(c.d) + (c.causal ? " causal" : "");
  return s;
}

// Odd lengths (97, 33) cross the reference's 64-row tiles; 65 ends one past a tile boundary.
std::vector<Case> cases() {
  return {{{2, 3}, 97, 97, 16, false}, {{2, 3}, 97, 97, 16, true}, {{}, 33, 33, 32, true},
          {{3}, 65, 65, 8, true},      {{2, 1, 2}, 33, 33, 24, false}, {{2, 2}, 33, 97, 16, false},
          {{1, 2}, 130, 70, 8, false}};
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// Plain attention's logsumexp per query row (fp64), for comparing L. Read off log_softmax at key 0 (never
// masked): torch::logsumexp goes through at::exp, which MKL's vector math may return with ~3e-9
// relative error (see flash_reference.cpp).
torch::Tensor plain_lse(const torch::Tensor& q, const torch::Tensor& k, bool causal) {
  auto s = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  if (causal) {
    auto mask = torch::ones({q.size(-2), k.size(-2)}, torch::kBool).triu(1);
    s = s.masked_fill(mask, -std::numeric_limits<double>::infinity());
  }
  auto first = s.select(-1, 0);
  return first - torch::log_softmax(s, -1).select(-1, 0);
}

TEST(FlashReference, ForwardMatchesPlainAttentionFp64) {
  for (const auto& c : cases()) {
    auto opts = torch::TensorOptions().dtype(torch::kDouble);
    auto q = torch::randn(shape(c, c.nq), opts), k = torch::randn(shape(c, c.nk), opts),
         v = torch::randn(shape(c, c.nk), opts);
    auto [o, L] = flash_reference_forward(q, k, v, c.causal);
    EXPECT_EQ(L.sizes(), q.sizes().slice(0, q.dim() - 1)) << describe(c);
    EXPECT_LT(max_diff(o, naive_attention(q, k, v, c.causal)), 1e-10) << describe(c);
    EXPECT_LT(max_diff(L, plain_lse(q, k, c.causal)), 1e-10) << describe(c);
  }
}

TEST(FlashReference, BackwardMatchesAutogradFp64) {
  for (const auto& c : cases()) {
    auto opts = torch::TensorOptions().dtype(torch::kDouble);
    auto q = torch::randn(shape(c, c.nq), opts).requires_grad_(), k = torch::randn(shape(c, c.nk), opts).requires_grad_(),
         v = torch::randn(shape(c, c.nk), opts).requires_grad_();
    auto dout = torch::randn(shape(c, c.nq), opts);
    naive_attention(q, k, v, c.causal).backward(dout);
    torch::NoGradGuard no_grad;
    auto [o, L] = flash_reference_forward(q, k, v, c.causal);
    auto [dq, dk, dv] = flash_reference_backward(q, k, v, o, L, dout, c.causal);
    EXPECT_LT(max_diff(dq, q.grad()), 1e-9) << describe(c);
    EXPECT_LT(max_diff(dk, k.grad()), 1e-9) << describe(c);
    EXPECT_LT(max_diff(dv, v.grad()), 1e-9) << describe(c);
  }
}

TEST(FlashAttentionOp, AutogradOnCpuSavesWhatBackwardNeeds) {
  for (bool causal : {false, true}) {
    auto opts = torch::TensorOptions().dtype(torch::kDouble);
    auto mk = [&] { return torch::randn({2, 3, 45, 16}, opts).requires_grad_(); };
    auto q = mk(), k = mk(), v = mk();
    auto q2 = q.detach().clone().requires_grad_(), k2 = k.detach().clone().requires_grad_(),
         v2 = v.detach().clone().requires_grad_();
    auto dout = torch::randn({2, 3, 45, 16}, opts);
    auto o = flash_attention(q, k, v, causal);
    o.backward(dout);
    naive_attention(q2, k2, v2, causal).backward(dout);
    EXPECT_LT(max_diff(o, naive_attention(q2, k2, v2, causal)), 1e-10);
    EXPECT_LT(max_diff(q.grad(), q2.grad()), 1e-9) << "causal=" << causal;
    EXPECT_LT(max_diff(k.grad(), k2.grad()), 1e-9) << "causal=" << causal;
    EXPECT_LT(max_diff(v.grad(), v2.grad()), 1e-9) << "causal=" << causal;
  }
}

TEST(FlashAttentionOp, HalfPrecisionDtypesKeepTheirDtypeAndStayClose) {
  for (auto dt : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    auto q64 = torch::randn({2, 50, 32}, torch::kDouble), k64 = torch::randn({2, 50, 32}, torch::kDouble),
         v64 = torch::randn({2, 50, 32}, torch::kDouble);
    auto [o, L] = flash_attention_forward(q64.to(dt), k64.to(dt), v64.to(dt), true);
    EXPECT_EQ(o.scalar_type(), dt);
    EXPECT_EQ(L.scalar_type(), torch::kFloat);
    // Reference on the rounded inputs in fp64; bf16 output rounding alone is ~4e-3 relative.
    auto ref = naive_attention(q64.to(dt).to(torch::kDouble), k64.to(dt).to(torch::kDouble),
                               v64.to(dt).to(torch::kDouble), true);
    const double tol = dt == torch::kFloat ? 1e-5 : (dt == torch::kHalf ? 5e-3 : 3e-2);
    EXPECT_LT(max_diff(o, ref), tol) << dt;
  }
}

TEST(FlashAttentionOp, DispatcherOpsMatchTheCppFunctions) {
  // The schemas' arguments: is_causal, then keyword-only scale, bottom_right, window_left, window_right,
  // deterministic.
  auto fwd = c10::Dispatcher::singleton()
                 .findSchemaOrThrow("lmscale::flash_attention_forward", "")
                 .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, const at::Tensor&, bool,
                                                           std::optional<double>, bool, int64_t, int64_t, bool)>();
  auto bwd = c10::Dispatcher::singleton()
                 .findSchemaOrThrow("lmscale::flash_attention_backward", "")
                 .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                     const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                     const at::Tensor&, bool, std::optional<double>, bool, int64_t, int64_t, bool)>();
  auto op = c10::Dispatcher::singleton()
                .findSchemaOrThrow("lmscale::flash_attention", "")
                .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, bool, std::optional<double>,
                                  bool, int64_t, int64_t, bool)>();
  auto q = torch::randn({2, 40, 16}, torch::kDouble).requires_grad_(), k = torch::randn({2, 40, 16}, torch::kDouble),
       v = torch::randn({2, 40, 16}, torch::kDouble);
  auto [o, L] = fwd.call(q.detach(), k, v, true, std::nullopt, false, -1, -1, false);
  EXPECT_LT(max_diff(o, naive_attention(q.detach(), k, v, true)), 1e-10);
  auto dout = torch::randn_like(o);
  auto [dq, dk, dv] = bwd.call(q.detach(), k, v, o, L, dout, true, std::nullopt, false, -1, -1, false);
  // The Autograd kernel of lmscale::flash_attention records the backward.
  op.call(q, k, v, true, std::nullopt, false, -1, -1, false).backward(dout);
  EXPECT_LT(max_diff(q.grad(), dq), 1e-9);
}

using lmscale::testing::expect_error;

TEST(FlashAttentionOp, BadInputsFailWithDiagnosis) {
  auto q = torch::randn({2, 8, 16}), k = torch::randn({2, 8, 16}), v = torch::randn({2, 8, 16});
  expect_error([&] { flash_attention_forward(q, k.to(torch::kDouble), v, false); }, "share one dtype");
  // Dim -3 is the heads: 2 query heads over 3 K/V heads do not group.
  expect_error([&] { flash_attention_forward(q, torch::randn({3, 8, 16}), torch::randn({3, 8, 16}), false); },
               "multiple of k's");
  expect_error([&] {
    flash_attention_forward(torch::randn({2, 2, 8, 16}), torch::randn({3, 2, 8, 16}), torch::randn({3, 2, 8, 16}),
                            false);
  }, "leading (batch) dims");
  expect_error([&] { flash_attention_forward(q, k, torch::randn({2, 8, 32}), false); }, "same shape");
  expect_error([&] { flash_attention_forward(q, torch::randn({2, 8, 32}), torch::randn({2, 8, 32}), false); },
               "head dim");
  expect_error([&] { flash_attention_forward(torch::randn({16}), k, v, false); }, "(..., N, D)");
  expect_error([&] { flash_attention_forward(q.to(torch::kInt), k.to(torch::kInt), v.to(torch::kInt), false); },
               "not supported");
  auto [o, L] = flash_attention_forward(q, k, v, false);
  expect_error([&] { flash_attention_backward(q, k, v, o, L.unsqueeze(-1), o, false); }, "logsumexp");
  expect_error([&] { flash_attention_backward(q, k, v, o, L, o.to(torch::kDouble), false); }, "dout");
}

}  // namespace
}  // namespace lmscale::ops
