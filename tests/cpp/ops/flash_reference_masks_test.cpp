// Every mask and layout of the reference and of the CPU ops against plain fp64 attention whose mask is written
// out entry by entry (flash_reference_plain.h): causal top-left (SDPA's) and bottom-right (FlashAttention's),
// sliding windows, grouped-query and multi-query K/V heads (nothing repeated; dK, dV summed over the group),
// Nq = 1, rows that see no key, lengths crossing tiles; packed variable-length batches with empty
// sequences; the mask arithmetic the kernels will share; the ops' argument checks.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "ops/flash_attention.h"
#include "ops/flash_reference.h"
#include "support/expect_error.h"
#include "ops/flash_reference_plain.h"

namespace lmscale::ops {
namespace {

using test::describe;
using test::explicit_mask;
using test::max_diff;
using test::max_diff_lse;
using test::plain_attention;
using test::PlainMask;

FlashMask to_flash(const PlainMask& m) { return FlashMask{m.causal, m.bottom_right, m.left, m.right}; }

// The masks every layout is checked under.
std::vector<PlainMask> masks() {
  return {{false, false, -1, -1}, {true, false, -1, -1}, {true, true, -1, -1},  {false, true, 5, 0},
          {false, false, 3, 7},   {false, true, 0, 0},   {false, false, -1, 2}, {false, true, 4, -1},
          {true, true, 10, -1},   {true, false, 6, 9}};
}

struct Lengths {
  int64_t nq, nk;
};
// Nq = 1 (decoding), Nk = 1, Nq < Nk and Nq > Nk crossing 16-row tiles, and a square one.
std::vector<Lengths> lengths() { return {{1, 1}, {1, 37}, {37, 1}, {33, 97}, {97, 33}, {40, 40}}; }

// (Hq, Hkv): the same heads, grouped-query, multi-query.
std::vector<std::pair<int64_t, int64_t>> heads() { return {{4, 4}, {4, 2}, {4, 1}}; }

TEST(FlashMask, SeesMatchesTheWrittenOutMask) {
  for (const auto& pm : masks())
    for (const auto& [nq, nk] : lengths()) {
      const auto m = to_flash(pm);
      auto want = explicit_mask(nq, nk, pm);
      auto a = want.accessor<bool, 2>();
      for (int64_t i = 0; i < nq; ++i)
        for (int64_t j = 0; j < nk; ++j)
          ASSERT_EQ(m.sees(i, j, nq, nk), a[i][j]) << describe(pm) << " i=" << i << " j=" << j;
    }
}

// The tile arithmetic, checked exhaustively against the written-out mask on a 7-row / 5-key tile grid: a
// skipped tile holds no visible pair, a mask-free one no hidden pair.
TEST(FlashMask, TileRangesAreExact) {
  for (const auto& pm : masks())
    for (const auto& [nq, nk] : lengths()) {
      const auto m = to_flash(pm);
      auto mask = explicit_mask(nq, nk, pm);
      for (int64_t i0 = 0; i0 < nq; i0 += 7) {
        const int64_t i1 = std::min(nq, i0 + 7);
        auto rows = mask.narrow(0, i0, i1 - i0);
        auto keys = visible_keys(m, nq, nk, i0, i1);
        auto seen = rows.any(0);  // (nk): keys some row sees
        for (int64_t j = 0; j < nk; ++j)
          ASSERT_EQ(seen[j].item<bool>(), !keys.empty() && j >= keys.begin && j < keys.end)
              << describe(pm) << " Nq=" << nq << " Nk=" << nk << " rows [" << i0 << ", " << i1 << ") key " << j;
        for (int64_t j0 = 0; j0 < nk; j0 += 5) {
          const int64_t j1 = std::min(nk, j0 + 5);
          ASSERT_EQ(mask_free(m, nq, nk, i0, i1, j0, j1), rows.narrow(1, j0, j1 - j0).all().item<bool>())
              << describe(pm) << " block [" << i0 << ", " << i1 << ") x [" << j0 << ", " << j1 << ")";
        }
      }
      for (int64_t j0 = 0; j0 < nk; j0 += 5) {
        const int64_t j1 = std::min(nk, j0 + 5);
        auto rows = visible_queries(m, nq, nk, j0, j1);
        auto seeing = mask.narrow(1, j0, j1 - j0).any(1);  // (nq): rows that see some key of the tile
        for (int64_t i = 0; i < nq; ++i)
          ASSERT_EQ(seeing[i].item<bool>(), !rows.empty() && i >= rows.begin && i < rows.end)
              << describe(pm) << " keys [" << j0 << ", " << j1 << ") row " << i;
      }
    }
}

// The reference against plain attention: O, L, dQ, dK, dV, every mask x lengths x heads, 16-row tiles.
TEST(FlashReferenceMasks, EveryMaskLengthAndHeadLayoutMatchesPlainAttention) {
  torch::manual_seed(0);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  for (const auto& pm : masks())
    for (const auto& [nq, nk] : lengths())
      for (const auto& [hq, hkv] : heads()) {
        const std::string what = describe(pm) + " Nq=" + std::to_string(nq) + " Nk=" + std::to_string(nk) +
                                 " heads " + std::to_string(hq) + "/" + std::to_string(hkv);
        auto q = torch::randn({2, hq, nq, 8}, opts).requires_grad_();
        auto k = torch::randn({2, hkv, nk, 8}, opts).requires_grad_();
        auto v = torch::randn({2, hkv, nk, 8}, opts).requires_grad_();
        const double scale = 0.3;
        auto [want_o, want_l] = plain_attention(q, k, v, explicit_mask(nq, nk, pm), scale);
        auto dout = torch::randn_like(want_o);
        auto want = torch::autograd::grad({want_o}, {q, k, v}, {dout});
        torch::NoGradGuard no_grad;
        auto [o, L] = flash_reference_forward(q, k, v, to_flash(pm), scale, /*tile=*/16);
        ASSERT_EQ(o.sizes(), q.sizes()) << what;
        ASSERT_EQ(L.sizes(), q.sizes().slice(0, 3)) << what;
        EXPECT_LT(max_diff(o, want_o), 1e-10) << what;
        EXPECT_LT(max_diff_lse(L, want_l), 1e-10) << what;
        auto [dq, dk, dv] = flash_reference_backward(q, k, v, o, L, dout, to_flash(pm), scale, /*tile=*/16);
        ASSERT_EQ(dk.sizes(), k.sizes()) << what;
        EXPECT_LT(max_diff(dq, want[0]), 1e-9) << what;
        EXPECT_LT(max_diff(dk, want[1]), 1e-9) << what;
        EXPECT_LT(max_diff(dv, want[2]), 1e-9) << what;
      }
}

// A row that sees no key (bottom-right with Nq > Nk, a window past the keys) is 0 in O, +inf in L, and passes
// no gradient, as in FlashAttention.
TEST(FlashReferenceMasks, RowsThatSeeNoKeyAreZeroWithInfiniteLse) {
  auto q = torch::randn({1, 2, 6, 8}, torch::kDouble), k = torch::randn({1, 2, 2, 8}, torch::kDouble),
       v = torch::randn({1, 2, 2, 8}, torch::kDouble);
  FlashMask bottom_right{true, true};
  auto [o, L] = flash_reference_forward(q, k, v, bottom_right);
  // Rows 0..3 see nothing (the diagonal of row i is key i - 4); rows 4, 5 see keys 0 and 0..1.
  EXPECT_EQ(o.narrow(-2, 0, 4).abs().max().item<double>(), 0.0);
  EXPECT_TRUE(torch::isinf(L.narrow(-1, 0, 4)).all().item<bool>());
  EXPECT_TRUE(torch::isfinite(L.narrow(-1, 4, 2)).all().item<bool>());
  auto dout = torch::randn_like(o);
  auto [dq, dk, dv] = flash_reference_backward(q, k, v, o, L, dout, bottom_right);
  EXPECT_EQ(dq.narrow(-2, 0, 4).abs().max().item<double>(), 0.0);
  EXPECT_TRUE(torch::isfinite(dk).all().item<bool>() && torch::isfinite(dv).all().item<bool>());
}

TEST(FlashReferenceMasks, DefaultTilesAndLowPrecisionStayClose) {
  // 64-row tiles, lengths past two tiles; bf16 in, fp32 compute: within bf16 rounding of the fp64 result.
  torch::manual_seed(1);
  const PlainMask pm{true, true, 50, -1};
  auto q64 = torch::randn({1, 4, 150, 32}, torch::kDouble), k64 = torch::randn({1, 2, 200, 32}, torch::kDouble),
       v64 = torch::randn({1, 2, 200, 32}, torch::kDouble);
  auto [o, L] = flash_reference_forward(q64.to(torch::kBFloat16), k64.to(torch::kBFloat16), v64.to(torch::kBFloat16),
                                        to_flash(pm));
  EXPECT_EQ(o.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(L.scalar_type(), torch::kFloat);
  auto r = [](const torch::Tensor& t) { return t.to(torch::kBFloat16).to(torch::kDouble); };
  auto [want_o, want_l] = plain_attention(r(q64), r(k64), r(v64), explicit_mask(150, 200, pm), 1.0 / std::sqrt(32.0));
  EXPECT_LT(max_diff(o, want_o), 3e-2);
  EXPECT_LT(max_diff_lse(L, want_l), 1e-4);
}

// ---------------------------------------------------------------- packed variable-length batches
struct Packed {
  std::vector<int64_t> len_q, len_k;
  int64_t pad_q = 0, pad_k = 0;  // rows past the last sequence
};

torch::Tensor offsets(const std::vector<int64_t>& lens) {
  std::vector<int32_t> cu{0};
  for (auto n : lens) cu.push_back(cu.back() + static_cast<int32_t>(n));
  return torch::tensor(cu, torch::kInt);
}

// Plain attention per sequence, packed back: (O (total_q, Hq, D), L (Hq, total_q)).
std::pair<torch::Tensor, torch::Tensor> plain_varlen(const torch::Tensor& q, const torch::Tensor& k,
                                                     const torch::Tensor& v, const Packed& p, const PlainMask& pm,
                                                     double scale) {
  std::vector<torch::Tensor> os, ls;
  int64_t sq = 0, sk = 0;
  for (size_t b = 0; b < p.len_q.size(); ++b) {
    const int64_t nq = p.len_q[b], nk = p.len_k[b];
    auto qb = q.narrow(0, sq, nq).transpose(0, 1), kb = k.narrow(0, sk, nk).transpose(0, 1),
         vb = v.narrow(0, sk, nk).transpose(0, 1);
    auto [ob, lb] = plain_attention(qb, kb, vb, explicit_mask(nq, nk, pm), scale);
    os.push_back(ob.transpose(0, 1));
    ls.push_back(lb);
    sq += nq;
    sk += nk;
  }
  const int64_t H = q.size(1), D = q.size(2);
  os.push_back(torch::zeros({p.pad_q, H, D}, q.options()));
  ls.push_back(torch::full({H, p.pad_q}, std::numeric_limits<double>::infinity(), q.options()));
  return {torch::cat(os, 0), torch::cat(ls, 1)};
}

std::vector<Packed> packings() {
  // Empty sequences (no queries; no keys with queries), Nq = 1, lengths crossing 16-row tiles, Nq != Nk in both
  // directions, and padding rows past the last sequence.
  return {{{5, 0, 17, 1, 33}, {5, 3, 40, 0, 20}, 0, 0}, {{1, 1, 1}, {9, 1, 30}, 3, 2}, {{37}, {37}, 0, 0}};
}

TEST(FlashReferenceVarlen, EveryMaskAndHeadLayoutMatchesPlainAttentionPerSequence) {
  torch::manual_seed(2);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  for (const auto& p : packings())
    for (const auto& pm : masks())
      for (const auto& [hq, hkv] : heads()) {
        int64_t tq = p.pad_q, tk = p.pad_k;
        for (auto n : p.len_q) tq += n;
        for (auto n : p.len_k) tk += n;
        const std::string what = describe(pm) + " heads " + std::to_string(hq) + "/" + std::to_string(hkv) +
                                 " total " + std::to_string(tq) + "/" + std::to_string(tk);
        auto q = torch::randn({tq, hq, 8}, opts).requires_grad_();
        auto k = torch::randn({tk, hkv, 8}, opts).requires_grad_();
        auto v = torch::randn({tk, hkv, 8}, opts).requires_grad_();
        auto [want_o, want_l] = plain_varlen(q, k, v, p, pm, 0.35);
        auto dout = torch::randn_like(want_o);
        auto want = torch::autograd::grad({want_o}, {q, k, v}, {dout}, /*retain_graph=*/false, false,
                                          /*allow_unused=*/true);
        torch::NoGradGuard no_grad;
        auto cu_q = offsets(p.len_q), cu_k = offsets(p.len_k);
        auto [o, L] = flash_reference_varlen_forward(q, k, v, cu_q, cu_k, to_flash(pm), 0.35, /*tile=*/16);
        ASSERT_EQ(L.sizes(), (std::vector<int64_t>{hq, tq})) << what;
        EXPECT_LT(max_diff(o, want_o), 1e-10) << what;
        EXPECT_LT(max_diff_lse(L, want_l), 1e-10) << what;
        auto [dq, dk, dv] = flash_reference_varlen_backward(q, k, v, o, L, dout, cu_q, cu_k, to_flash(pm), 0.35, 16);
        EXPECT_LT(max_diff(dq, want[0]), 1e-9) << what;
        EXPECT_LT(max_diff(dk, want[1]), 1e-9) << what;
        EXPECT_LT(max_diff(dv, want[2]), 1e-9) << what;
      }
}

// The ops (checks, then the reference) and the autograd Function, FlashAttention's alignment.
TEST(FlashAttentionVarlenOp, AutogradMatchesPlainAttention) {
  torch::manual_seed(3);
  const Packed p{{7, 0, 20}, {9, 4, 20}, 0, 0};
  const PlainMask pm{true, true, -1, -1};
  auto q = torch::randn({27, 6, 16}, torch::kDouble).requires_grad_();
  auto k = torch::randn({33, 2, 16}, torch::kDouble).requires_grad_();
  auto v = torch::randn({33, 2, 16}, torch::kDouble).requires_grad_();
  auto [want_o, want_l] = plain_varlen(q, k, v, p, pm, 0.25);
  auto dout = torch::randn_like(want_o);
  auto want = torch::autograd::grad({want_o}, {q, k, v}, {dout});
  auto o = flash_attention_varlen(q, k, v, offsets(p.len_q), offsets(p.len_k), 20, 20, to_flash(pm), 0.25);
  EXPECT_LT(max_diff(o, want_o), 1e-10);
  auto got = torch::autograd::grad({o}, {q, k, v}, {dout});
  for (int i = 0; i < 3; ++i) EXPECT_LT(max_diff(got[i], want[i]), 1e-9) << "d" << "qkv"[i];
}

using lmscale::testing::expect_error;

TEST(FlashAttentionVarlenOp, BadOffsetsFailWithDiagnosis) {
  auto q = torch::randn({10, 4, 8}), k = torch::randn({10, 2, 8});
  auto cu = torch::tensor({0, 4, 10}, torch::kInt);
  auto fwd = [&](const torch::Tensor& cq, const torch::Tensor& ck, int64_t mq, int64_t mk) {
    flash_attention_varlen_forward(q, k, k, cq, ck, mq, mk);
  };
  fwd(cu, cu, 6, 6);  // fine
  expect_error([&] { fwd(cu.to(torch::kLong), cu, 6, 6); }, "int32");
  expect_error([&] { fwd(cu, torch::tensor({0, 10}, torch::kInt), 6, 10); }, "same sequences");
  expect_error([&] { fwd(torch::tensor({1, 4, 10}, torch::kInt), cu, 6, 6); }, "start at 0");
  expect_error([&] { fwd(torch::tensor({0, 6, 4}, torch::kInt), cu, 6, 6); }, "non-decreasing");
  expect_error([&] { fwd(torch::tensor({0, 4, 11}, torch::kInt), cu, 7, 6); }, "past the 10 packed rows");
  expect_error([&] { fwd(cu, cu, 5, 6); }, "more than max_seqlen_q = 5");
  auto k3 = torch::randn({10, 3, 8});
  expect_error([&] { flash_attention_varlen_forward(q, k3, k3, cu, cu, 6, 6); }, "multiple of k's");
  expect_error([&] { flash_attention_varlen_forward(q.unsqueeze(0), k, k, cu, cu, 6, 6); }, "(total_q, Hq, D)");
  auto [o, L] = flash_attention_varlen_forward(q, k, k, cu, cu, 6, 6);
  expect_error([&] { flash_attention_varlen_backward(q, k, k, o, L.t(), o, cu, cu, 6, 6); }, "(Hq, total_q)");
}

TEST(FlashAttentionOp, TheMaskArgumentsReachTheReference) {
  // The op (checks, dispatch to the reference) with GQA, bottom-right causal with Nq < Nk, a window and a scale.
  torch::manual_seed(4);
  const PlainMask pm{true, true, 12, -1};
  auto q = torch::randn({2, 6, 30, 16}, torch::kDouble).requires_grad_();
  auto k = torch::randn({2, 3, 50, 16}, torch::kDouble).requires_grad_();
  auto v = torch::randn({2, 3, 50, 16}, torch::kDouble).requires_grad_();
  auto [want_o, want_l] = plain_attention(q, k, v, explicit_mask(30, 50, pm), 0.2);
  auto dout = torch::randn_like(want_o);
  auto want = torch::autograd::grad({want_o}, {q, k, v}, {dout});
  auto o = flash_attention(q, k, v, to_flash(pm), 0.2, /*deterministic=*/true);
  EXPECT_LT(max_diff(o, want_o), 1e-10);
  auto got = torch::autograd::grad({o}, {q, k, v}, {dout});
  for (int i = 0; i < 3; ++i) EXPECT_LT(max_diff(got[i], want[i]), 1e-9) << "d" << "qkv"[i];
}

}  // namespace
}  // namespace lmscale::ops
