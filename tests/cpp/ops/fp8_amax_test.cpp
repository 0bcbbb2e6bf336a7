// The amax an FP8 cast reads from the kernel that wrote its operand (ops/fp8_amax.h, issue 27). CPU: the
// ATen amax is the bits of max |x| from the definition (NaN with its payload, ±inf, −0, subnormals), a
// cast with a given amax is bit for bit the cast that takes its own, a slot answers only for the very
// tensor it recorded, and record_grad_amax records the gradient the consumer receives. GPU: every
// producer kernel's amax (RMSNorm forward and backward, the SwiGLU gate both ways, RoPE's backward) is
// fp8_amax_kernel's over the tensor it stored, specials included, and a CUDA-graph replay re-zeroes it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "ops/fp8_amax.h"
#include "ops/fp8_quantize.h"
#include "ops/fused_rmsnorm.h"
#include "ops/fused_rope.h"
#include "ops/fused_swiglu.h"

#ifdef LMSCALE_HAS_KERNELS
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace lmscale {
namespace {

// max over x of the float bits of |x| with the sign cleared, from the definition.
int32_t reference_amax_bits(const torch::Tensor& x) {
  auto v = x.detach().to(torch::kFloat).contiguous().cpu();
  const float* p = v.data_ptr<float>();
  uint32_t m = 0;
  for (int64_t i = 0; i < v.numel(); ++i) {
    uint32_t u;
    std::memcpy(&u, p + i, sizeof u);
    m = std::max(m, u & 0x7fffffffu);
  }
  return static_cast<int32_t>(m);
}

int32_t bits_of(const torch::Tensor& amax_bits) { return amax_bits.cpu().item<int32_t>(); }

// Sets element i (flat) of a bf16 or fp32 tensor to the given raw bits.
void set_bits(torch::Tensor& t, int64_t i, uint32_t bits) {
  if (t.scalar_type() == torch::kBFloat16) t.view(torch::kShort).view(-1)[i] = static_cast<int16_t>(bits >> 16);
  else t.view(torch::kInt).view(-1)[i] = static_cast<int32_t>(bits);
}

enum class Special { kFinite, kInf, kNaN };

// (rows, cols) of randn with an outlier, −0 and a subnormal; then ±inf, or NaNs with payloads and
// either sign (the max must pick the largest bits, not any NaN).
torch::Tensor values(int64_t rows, int64_t cols, torch::ScalarType dt, Special special, uint64_t seed = 5) {
  torch::manual_seed(seed);
  auto t = (torch::randn({rows, cols}) * 3).to(dt);
  set_bits(t, 1, 0x80000000u);  // −0
  set_bits(t, 2, 0x00010000u);  // subnormal
  t.view(-1)[3] = 900.f;
  if (special == Special::kInf) set_bits(t, 5, 0xff800000u), set_bits(t, 7, 0x7f800000u);
  if (special == Special::kNaN) set_bits(t, 5, 0xffc30000u), set_bits(t, 9, 0x7f810000u), set_bits(t, 11, 0x7fc00000u);
  return t;
}

std::vector<std::pair<torch::ScalarType, Special>> cases() {
  std::vector<std::pair<torch::ScalarType, Special>> out;
  for (auto dt : {torch::kBFloat16, torch::kFloat})
    for (auto sp : {Special::kFinite, Special::kInf, Special::kNaN}) out.emplace_back(dt, sp);
  return out;
}

bool same_bytes(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  return torch::equal(a.cpu().view(torch::kUInt8), b.cpu().view(torch::kUInt8));
}

bool same_fp8(const ops::Fp8Tensor& a, const ops::Fp8Tensor& b) {
  return same_bytes(a.data, b.data) && same_bytes(a.data_t, b.data_t) &&
         torch::equal(a.inv_scale.cpu().view(torch::kInt), b.inv_scale.cpu().view(torch::kInt));
}

TEST(Fp8Amax, AtenAmaxIsTheBitsOfTheDefinition) {
  for (auto [dt, sp] : cases()) {
    auto x = values(32, 48, dt, sp);
    const int32_t want = reference_amax_bits(x);
    EXPECT_EQ(bits_of(ops::fp8_amax(x)), want) << dt << " special " << static_cast<int>(sp);
    if (sp == Special::kNaN) {
      EXPECT_EQ(want, 0x7fc30000) << "the largest NaN bits, sign cleared";
    } else if (sp == Special::kInf) {
      EXPECT_EQ(want, 0x7f800000);
    }
  }
  EXPECT_EQ(bits_of(ops::fp8_amax(torch::zeros({16, 16}))), 0);
  EXPECT_EQ(bits_of(ops::fp8_amax(-torch::zeros({16, 16}))), 0) << "−0 counts as 0";
}

TEST(Fp8Amax, CastWithAGivenAmaxIsTheCastThatTakesItsOwn) {
  for (auto [dt, sp] : cases())
    for (auto fp8 : {torch::kFloat8_e4m3fn, torch::kFloat8_e5m2}) {
      auto x = values(32, 48, dt, sp);
      const auto own = ops::fp8_quantize(x, fp8, true, true);
      const auto given = ops::fp8_quantize(x, fp8, true, true, ops::fp8_amax(x));
      EXPECT_TRUE(same_fp8(own, given)) << dt << " " << fp8 << " special " << static_cast<int>(sp);
      // A wrong amax gives other bytes: the comparison can fail.
      if (sp == Special::kFinite) {
        auto doubled = ops::fp8_quantize(x, fp8, true, true, ops::fp8_amax(x * 4));
        EXPECT_FALSE(same_fp8(own, doubled));
      }
    }
}

TEST(Fp8Amax, TheCastCountsOnlyTheAmaxPassesItRuns) {
  auto x = torch::randn({16, 32});
  const int64_t before = ops::fp8_casts_with_own_amax();
  ops::fp8_quantize(x, torch::kFloat8_e4m3fn, true, false);
  EXPECT_EQ(ops::fp8_casts_with_own_amax(), before + 1);
  ops::fp8_quantize(x, torch::kFloat8_e4m3fn, true, false, ops::fp8_amax(x));
  EXPECT_EQ(ops::fp8_casts_with_own_amax(), before + 1);
}

TEST(Fp8Amax, ASlotAnswersOnlyForTheTensorItRecorded) {
  auto t = torch::randn({8, 32}).to(torch::kBFloat16);
  auto slot = ops::new_fp8_amax_slot();
  EXPECT_FALSE(slot->bits_for(t).defined()) << "nothing recorded yet";
  slot->record(t, ops::fp8_amax(t));
  EXPECT_TRUE(slot->bits_for(t).defined());
  EXPECT_TRUE(slot->bits_for(t.reshape({2, 4, 32})).defined()) << "a view of the same elements";
  EXPECT_TRUE(slot->bits_for(t.reshape({-1, 32})).defined());
  EXPECT_FALSE(slot->bits_for(t.clone()).defined()) << "a copy";
  EXPECT_FALSE(slot->bits_for(t.slice(0, 0, 4)).defined()) << "a part";
  EXPECT_FALSE(slot->bits_for(t.slice(0, 4, 8)).defined()) << "another part";
  EXPECT_FALSE(slot->bits_for(t.t()).defined()) << "not contiguous";
  EXPECT_FALSE(slot->bits_for(t.to(torch::kFloat)).defined()) << "another dtype";
  t.mul_(2);  // written since: the amax is stale
  EXPECT_FALSE(slot->bits_for(t).defined());
}

TEST(Fp8Amax, RecordGradAmaxRecordsTheGradientTheConsumerGets) {
  auto x = torch::randn({16, 32}).to(torch::kBFloat16).requires_grad_(true);
  auto slot = ops::new_fp8_amax_slot();
  auto y = ops::record_grad_amax(x, slot);
  EXPECT_TRUE(torch::equal(y, x)) << "identity in forward";
  auto w = values(16, 32, torch::kFloat, Special::kFinite, 9);
  auto g = torch::autograd::grad({(y.to(torch::kFloat) * w).sum()}, {x})[0];
  const auto bits = slot->bits_for(g);
  ASSERT_TRUE(bits.defined()) << "the slot must name the gradient as handed on";
  EXPECT_EQ(bits_of(bits), reference_amax_bits(g));
  EXPECT_NE(bits_of(bits), 0);
  EXPECT_EQ(ops::record_grad_amax(x, {}).data_ptr(), x.data_ptr()) << "no slot: x itself";
}

// The fused ops' CPU paths (their ATen references, one function each with the kernels' path) keep the
// producers' contract: each slot names the very tensor the consumer gets (the result, or the gradient
// autograd hands on) with its amax, so a model on the CPU feeds its FP8 consumers as the kernels do.
TEST(Fp8Amax, TheFusedOpsReferencesRecordWhatTheConsumerGets) {
  auto expect_amax = [](const ops::Fp8AmaxSlot& slot, const torch::Tensor& t, const std::string& what) {
    const auto bits = slot->bits_for(t);
    ASSERT_TRUE(bits.defined()) << what << ": the slot does not name the tensor the consumer gets";
    EXPECT_EQ(bits_of(bits), reference_amax_bits(t)) << what;
  };
  const auto bf16 = torch::kBFloat16;
  const auto finite = Special::kFinite;
  auto x = values(32, 64, torch::kFloat, finite, 1).requires_grad_(true);
  auto r = values(32, 64, bf16, finite, 2).requires_grad_(true);
  auto gain = (torch::rand({64}) + 0.5f).requires_grad_(true);
  auto y_amax = ops::new_fp8_amax_slot(), dres_amax = ops::new_fp8_amax_slot();
  auto [h, y] = ops::rms_norm(x, r, gain, 1e-5, bf16, y_amax, dres_amax);
  expect_amax(y_amax, y, "rms_norm y");
  auto dn = torch::autograd::grad({h, y}, {x, r}, {values(32, 64, torch::kFloat, finite, 3), values(32, 64, bf16, finite, 4)});
  expect_amax(dres_amax, dn[1], "rms_norm dresidual");

  auto a = values(16, 96, bf16, finite, 5).requires_grad_(true), b = values(16, 96, bf16, finite, 6).requires_grad_(true);
  auto out_amax = ops::new_fp8_amax_slot(), da_amax = ops::new_fp8_amax_slot(), db_amax = ops::new_fp8_amax_slot();
  auto out = ops::swiglu(a, b, out_amax, da_amax, db_amax);
  expect_amax(out_amax, out, "swiglu out");
  auto ds = torch::autograd::grad({out}, {a, b}, {values(16, 96, bf16, finite, 7)});
  expect_amax(da_amax, ds[0], "swiglu da");
  expect_amax(db_amax, ds[1], "swiglu db");

  const int64_t B = 2, T = 16, H = 4, D = 32, C = H * D;
  auto theta = torch::arange(T, torch::kDouble).unsqueeze(1) *
               torch::pow(10000.0, -torch::arange(0, D / 2, torch::kDouble) * 2 / D).unsqueeze(0);
  auto rotation = torch::stack({theta.cos(), theta.sin()}, -1).to(torch::kFloat);
  auto qkv = values(B * T, 3 * C, bf16, finite, 8).view({B, T, 3 * C}).requires_grad_(true);
  auto dqkv_amax = ops::new_fp8_amax_slot();
  auto [q, k, v] = ops::rope_qkv(qkv, rotation, H, dqkv_amax);
  std::vector<torch::Tensor> dout;
  for (int i = 0; i < 3; ++i) dout.push_back(values(B * H * T, D, bf16, finite, 9 + i).view({B, H, T, D}));
  expect_amax(dqkv_amax, torch::autograd::grad({q, k, v}, {qkv}, dout)[0], "rope_qkv dqkv");
}

// ----------------------------------------------------------------------------------------------
// GPU: the producer kernels' amax against fp8_amax_kernel (ops::fp8_amax on CUDA with shapes that are
// multiples of 16) over what they stored.

#ifdef LMSCALE_HAS_KERNELS
torch::Tensor cuda(const torch::Tensor& t) { return t.to(torch::kCUDA); }

// The slot's bits for t, which must be there, against the separate pass over t.
void expect_kernel_amax(const ops::Fp8AmaxSlot& slot, const torch::Tensor& t, const std::string& what) {
  const auto bits = slot->bits_for(t);
  ASSERT_TRUE(bits.defined()) << what << ": the slot does not name the tensor the consumer gets";
  EXPECT_EQ(bits_of(bits), bits_of(ops::fp8_amax(t))) << what;
  EXPECT_EQ(bits_of(bits), reference_amax_bits(t)) << what;
}

TEST(Fp8AmaxGpu, RmsNormTakesTheAmaxOfYAndOfTheResidualGradient) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (auto sp : {Special::kFinite, Special::kInf, Special::kNaN})
    for (auto x_dtype : {torch::kFloat, torch::kBFloat16})  // h fp32 (dresidual separate) or bf16 (dresidual = dx)
      for (int64_t C : {64, 1024}) {
        const std::string what = std::string(c10::toString(x_dtype)) + " C=" + std::to_string(C) + " special " +
                                 std::to_string(static_cast<int>(sp));
        auto x = cuda(values(32, C, x_dtype, Special::kFinite, 1)).requires_grad_(true);
        auto r = cuda(values(32, C, torch::kBFloat16, Special::kFinite, 2)).requires_grad_(true);
        auto gain = cuda(torch::rand({C}) + 0.5f).requires_grad_(true);
        auto y_amax = ops::new_fp8_amax_slot(), dres_amax = ops::new_fp8_amax_slot();
        auto [h, y] = ops::rms_norm(x, r, gain, 1e-5, torch::kBFloat16, y_amax, dres_amax);
        ASSERT_TRUE(ops::rms_norm_uses_kernel(x, r, gain, torch::kBFloat16));
        expect_kernel_amax(y_amax, y, what + " y");
        auto dy = cuda(values(32, C, torch::kBFloat16, sp, 3)), dh = cuda(values(32, C, x_dtype, Special::kFinite, 4));
        auto grads = torch::autograd::grad({h, y}, {x, r}, {dh, dy});
        expect_kernel_amax(dres_amax, grads[1], what + " dresidual");
      }
}

TEST(Fp8AmaxGpu, SwiGluGateTakesTheAmaxOfItsOutputAndOfBothGradients) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (auto sp : {Special::kFinite, Special::kInf, Special::kNaN})
    for (bool column_blocks : {false, true}) {  // a and b as column blocks of one (rows, 2F) GEMM output
      const std::string what = std::string(column_blocks ? "column blocks" : "contiguous") + " special " +
                               std::to_string(static_cast<int>(sp));
      auto ab = cuda(torch::cat({values(64, 96, torch::kBFloat16, sp, 1), values(64, 96, torch::kBFloat16, sp, 2)}, 1));
      auto a = column_blocks ? ab.slice(1, 0, 96) : ab.slice(1, 0, 96).contiguous();
      auto b = column_blocks ? ab.slice(1, 96, 192) : ab.slice(1, 96, 192).contiguous();
      a.requires_grad_(true), b.requires_grad_(true);
      ASSERT_TRUE(ops::swiglu_uses_kernel(a, b));
      auto out_amax = ops::new_fp8_amax_slot(), da_amax = ops::new_fp8_amax_slot(), db_amax = ops::new_fp8_amax_slot();
      auto out = ops::swiglu(a, b, out_amax, da_amax, db_amax);
      expect_kernel_amax(out_amax, out, what + " out");
      auto grads = torch::autograd::grad({out}, {a, b}, {cuda(values(64, 96, torch::kBFloat16, sp, 3))});
      expect_kernel_amax(da_amax, grads[0], what + " da");
      expect_kernel_amax(db_amax, grads[1], what + " db");
    }
}

TEST(Fp8AmaxGpu, RopeBackwardTakesTheAmaxOfTheQkvGradient) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t B = 2, T = 16, H = 4, D = 32, C = H * D;
  auto theta = torch::arange(T, torch::kDouble).unsqueeze(1) *
               torch::pow(10000.0, -torch::arange(0, D / 2, torch::kDouble) * 2 / D).unsqueeze(0);
  auto rotation = cuda(torch::stack({theta.cos(), theta.sin()}, -1).to(torch::kFloat));
  for (auto sp : {Special::kFinite, Special::kInf, Special::kNaN}) {
    auto qkv = cuda(values(B * T, 3 * C, torch::kBFloat16, Special::kFinite, 1).view({B, T, 3 * C})).requires_grad_(true);
    auto slot = ops::new_fp8_amax_slot();
    ASSERT_TRUE(ops::rope_qkv_uses_kernel(qkv, rotation));
    auto [q, k, v] = ops::rope_qkv(qkv, rotation, H, slot);
    std::vector<torch::Tensor> dout;
    for (int i = 0; i < 3; ++i) dout.push_back(cuda(values(B * H * T, D, torch::kBFloat16, sp, 2 + i)).view({B, H, T, D}));
    auto dqkv = torch::autograd::grad({q, k, v}, {qkv}, dout)[0];
    expect_kernel_amax(slot, dqkv, "dqkv special " + std::to_string(static_cast<int>(sp)));
  }
}

TEST(Fp8AmaxGpu, AGraphReplayZeroesTheSlotAgain) {
  // Captured once with large inputs, replayed with small ones: a slot not zeroed inside the graph
  // would keep the old, larger amax.
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto a = cuda(torch::randn({64, 128}) * 50).to(torch::kBFloat16), b = cuda(torch::randn({64, 128}) * 50).to(torch::kBFloat16);
  auto side = c10::cuda::getStreamFromPool();
  c10::cuda::CUDAStreamGuard guard(side);
  auto slot = ops::new_fp8_amax_slot();
  torch::Tensor out;
  ops::swiglu(a, b, slot);  // warm-up outside the capture
  side.synchronize();
  at::cuda::CUDAGraph graph;
  graph.capture_begin();
  out = ops::swiglu(a, b, slot);
  graph.capture_end();
  const auto bits = slot->bits_for(out);
  ASSERT_TRUE(bits.defined());
  graph.replay();
  side.synchronize();
  const int32_t large = bits_of(bits);
  EXPECT_EQ(large, bits_of(ops::fp8_amax(out)));
  a.mul_(0.01), b.mul_(0.01);
  graph.replay();
  side.synchronize();
  EXPECT_EQ(bits_of(bits), bits_of(ops::fp8_amax(out)));
  EXPECT_LT(bits_of(bits), large);
}
#endif

}  // namespace
}  // namespace lmscale
