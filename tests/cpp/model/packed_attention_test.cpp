// Packed rows (PackedSegments, model/attention.h): each attention core on rows holding several
// documents gives every document what it gives that document alone (outputs and gradients of q, k, v),
// the whole model's logits too, and bad offsets are refused with the rule they break. CPU: the flash
// core runs the varlen reference (ops/flash_reference.h); on a GPU (skipped without one) the varlen
// kernels against it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <utility>
#include <vector>

#include "model/attention.h"
#include "model/transformer.h"
#include "ops/flash_attention.h"
#include "support/expect_error.h"

namespace lmscale {
namespace {

// Two rows of T = 12 with documents at the row's start, its end, one token long (two boundaries in a
// row), and a row of one document.
constexpr int64_t kB = 2, kT = 12;
const std::vector<int32_t> kOffsets = {0, 3, 7, 8, 12, 24};

// [begin, end) of each segment, in (row, first position, length).
std::vector<std::tuple<int64_t, int64_t, int64_t>> segments_of(const std::vector<int32_t>& offsets) {
  std::vector<std::tuple<int64_t, int64_t, int64_t>> s;
  for (size_t i = 0; i + 1 < offsets.size(); ++i)
    s.emplace_back(offsets[i] / kT, offsets[i] % kT, offsets[i + 1] - offsets[i]);
  return s;
}

class PackedAttention : public ::testing::TestWithParam<std::pair<AttentionBackend, torch::ScalarType>> {};

TEST_P(PackedAttention, EachDocumentAsIfAlone) {
  const auto [backend, dtype] = GetParam();
  torch::manual_seed(0);
  const int64_t H = 2, D = 16;
  const auto opts = torch::TensorOptions().dtype(dtype);
  auto q = torch::randn({kB, H, kT, D}, opts).requires_grad_(), k = torch::randn({kB, H, kT, D}, opts).requires_grad_(),
       v = torch::randn({kB, H, kT, D}, opts).requires_grad_();
  const auto dout = torch::randn({kB, H, kT, D}, opts);
  const PackedSegments segments = packed_segments(kOffsets, kB, kT, torch::kCPU);
  EXPECT_EQ(segments.max_seqlen, 12);
  const auto o = attention_core(q, k, v, /*causal=*/true, backend, segments);
  const auto grads = torch::autograd::grad({o}, {q, k, v}, {dout});
  // fp64: rounding only (the cores sum in another order than one document alone); fp32: its rounding
  // over sums of 12 terms.
  const double tol = dtype == torch::kDouble ? 1e-12 : 1e-5;
  for (const auto& [row, first, n] : segments_of(kOffsets)) {
    using torch::indexing::Slice;
    auto part = [&, row = row, first = first, n = n](const torch::Tensor& t) {
      return t.index({Slice(row, row + 1), Slice(), Slice(first, first + n)});
    };
    const auto qa = part(q).detach().requires_grad_(), ka = part(k).detach().requires_grad_(),
               va = part(v).detach().requires_grad_();
    const auto alone = attention_core(qa, ka, va, /*causal=*/true, backend);
    const auto alone_grads = torch::autograd::grad({alone}, {qa, ka, va}, {part(dout)});
    EXPECT_TRUE(torch::allclose(part(o), alone, tol, tol)) << "segment at " << row << ":" << first << ", max diff "
                                                          << (part(o) - alone).abs().max().item<double>();
    for (int i = 0; i < 3; ++i)
      EXPECT_TRUE(torch::allclose(part(grads[i]), alone_grads[i], tol, tol))
          << "gradient " << "qkv"[i] << " of segment at " << row << ":" << first << ", max diff "
          << (part(grads[i]) - alone_grads[i]).abs().max().item<double>();
  }
  // Not the row's causal attention: the mask did something.
  EXPECT_FALSE(torch::allclose(o, attention_core(q, k, v, /*causal=*/true, backend), 1e-3, 1e-3));
}

INSTANTIATE_TEST_SUITE_P(Cores, PackedAttention,
                         ::testing::Values(std::make_pair(AttentionBackend::Naive, torch::kDouble),
                                           std::make_pair(AttentionBackend::Sdpa, torch::kDouble),
                                           std::make_pair(AttentionBackend::Flash, torch::kDouble),
                                           std::make_pair(AttentionBackend::Naive, torch::kFloat),
                                           std::make_pair(AttentionBackend::Flash, torch::kFloat)));

// The flash core on CUDA (the varlen kernels, under bf16 and fp32) against the fp64 reference of each
// document alone, at the model's head dim for small (64).
TEST(PackedSegments, FlashKernelsGiveEachDocumentItsAttentionAlone) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t H = 4, D = 64;
  for (const auto dtype : {torch::kBFloat16, torch::kFloat}) {
    if (!ops::flash_kernel_available(dtype, D)) continue;
    torch::manual_seed(0);
    const auto q = torch::randn({kB, H, kT, D}, torch::kDouble), k = torch::randn({kB, H, kT, D}, torch::kDouble),
               v = torch::randn({kB, H, kT, D}, torch::kDouble);
    auto on_gpu = [&](const torch::Tensor& t) { return t.to(torch::kCUDA, dtype); };
    const auto o = attention_core(on_gpu(q), on_gpu(k), on_gpu(v), /*causal=*/true, AttentionBackend::Flash,
                                  packed_segments(kOffsets, kB, kT, torch::kCUDA))
                       .to(torch::kCPU, torch::kDouble);
    // bf16: the inputs' own rounding (8 bits) over sums of up to 12 terms; fp32: its rounding.
    const double tol = dtype == torch::kBFloat16 ? 3e-2 : 1e-4;
    for (const auto& [row, first, n] : segments_of(kOffsets)) {
      using torch::indexing::Slice;
      auto part = [row = row, first = first, n = n](const torch::Tensor& t) {
        return t.index({Slice(row, row + 1), Slice(), Slice(first, first + n)});
      };
      const auto alone = attention_core(part(q), part(k), part(v), /*causal=*/true, AttentionBackend::Naive);
      EXPECT_TRUE(torch::allclose(part(o), alone, tol, tol))
          << dtype << ", segment at " << row << ":" << first << ", max diff " << (part(o) - alone).abs().max().item<double>();
    }
  }
}

TEST(PackedSegments, MaskIsBlockDiagonalCausal) {
  const auto sees = segment_causal_mask(packed_segments({0, 2, 4}, 1, 4, torch::kCPU), 1, 4);
  ASSERT_EQ(sees.sizes(), (std::vector<int64_t>{1, 1, 4, 4}));
  const auto expected = torch::tensor({1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1}).to(torch::kBool).view({1, 1, 4, 4});
  EXPECT_TRUE(torch::equal(sees, expected)) << sees;
}

TEST(PackedSegments, RefusesOffsetsThatBreakTheRules) {
  using testing::expect_error;
  expect_error([] { packed_segments({0, 3, 12}, 2, 12, torch::kCPU); }, "run from 0 to rows × T = 24");
  expect_error([] { packed_segments({0, 3, 3, 24}, 2, 12, torch::kCPU); }, "every segment holds a token");
  expect_error([] { packed_segments({0, 10, 14, 24}, 2, 12, torch::kCPU); }, "crosses the end of row 0");
}

TEST(PackedSegments, ModelLogitsOfEachDocumentAsIfAlone) {
  torch::manual_seed(0);
  ModelConfig cfg = model_config("tiny");
  cfg.context_length = kT;
  for (const auto backend : {AttentionBackend::Naive, AttentionBackend::Flash}) {
    cfg.attention = backend;
    TransformerLM model(cfg);
    model->to(torch::kDouble);
    const auto tokens = torch::randint(0, cfg.vocab_size, {kB, kT}, torch::kLong);
    torch::NoGradGuard no_grad;
    const auto packed = model(tokens, packed_segments(kOffsets, kB, kT, torch::kCPU));
    for (const auto& [row, first, n] : segments_of(kOffsets)) {
      using torch::indexing::Slice;
      const auto alone = model(tokens.index({Slice(row, row + 1), Slice(first, first + n)}));
      const auto mine = packed.index({Slice(row, row + 1), Slice(first, first + n)});
      // Positions run through the row: a document shifted along it scores as alone because RoPE's
      // scores depend on distances only, exactly so but for the RoPE table's fp32 rounding (~1e-7).
      EXPECT_TRUE(torch::allclose(mine, alone, 1e-6, 1e-6))
          << attention_backend_name(backend) << ", segment at " << row << ":" << first << ", max diff "
          << (mine - alone).abs().max().item<double>();
    }
  }
}

}  // namespace
}  // namespace lmscale
