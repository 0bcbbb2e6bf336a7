// Delayed FP8 scaling (ops/fp8_history.h, kernels/fp8_history_params.h). CPU: the roll keeps the
// largest amax of the last 16 steps and derives the scale by the definition (2^floor(log2(max/amax)),
// amax 0 → 1, inf or NaN → NaN until it leaves the window); the delayed cast against a reference
// written from the definition (exact scale, saturation at ±max, NaN kept, inf or NaN poisoning the
// decode factor); a slot folds a dynamic step's amax into its history and hands the producer's FP8
// form only to the tensor it was recorded for. GPU (skips elsewhere): the roll kernel is the host roll,
// and RMSNorm's forward (with the FP8 transpose), the SwiGLU gate (both ways) and RoPE's backward
// writing FP8 themselves give the bytes of the unfused path (bf16 kernel, then the cast with the same
// scale), bit for bit, saturation included.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e5m2.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/fp8_history_params.h"
#include "ops/fp8_amax.h"
#include "ops/fp8_history.h"
#include "ops/fused_adamw.h"
#include "ops/fp8_quantize.h"

#ifdef LMSCALE_HAS_KERNELS
#include <ATen/cuda/CUDAContext.h>

#include "kernels/fp8_cast_params.h"
#include "kernels/fused_rmsnorm_params.h"
#include "kernels/fused_rope_params.h"
#include "kernels/fused_swiglu_params.h"
#endif

namespace lmscale {
namespace {

uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

// The scale from the definition, in long double: the largest power of two s with amax·s <= max,
// exponent clamped to [-126, 127]; amax 0 → 1; inf or NaN → NaN.
float reference_scale(float amax, float max) {
  if (std::isnan(amax) || std::isinf(amax)) return std::numeric_limits<float>::quiet_NaN();
  if (amax == 0.f) return 1.f;
  long double e = std::floor(std::log2(static_cast<long double>(max) / static_cast<long double>(amax)));
  e = std::max<long double>(-126, std::min<long double>(127, e));
  return std::ldexp(1.f, static_cast<int>(e));
}

// One history row on the CPU with `amaxes` as its past steps (oldest first), rolled in.
torch::Tensor history_after(const std::vector<float>& amaxes, at::ScalarType fp8) {
  auto h = ops::new_fp8_histories({fp8}, torch::kCPU);
  for (float a : amaxes) {
    ops::fp8_history_ptr(h[0])->amax = bits(std::fabs(a)) & 0x7fffffffu;  // as a producer records it
    ops::roll_fp8_histories(h);
  }
  return h;
}

float scale_of(const torch::Tensor& h) { return ops::fp8_history_scale(h.dim() == 2 ? h[0] : h).item<float>(); }

}  // namespace

TEST(Fp8History, RollKeepsTheLargestAmaxOfTheLastSixteenSteps) {
  std::vector<float> seen;
  torch::manual_seed(3);
  auto amaxes = (torch::randn({40}) * 20).exp();  // spans many binades, up and down
  auto h = ops::new_fp8_histories({torch::kFloat8_e4m3fn}, torch::kCPU);
  EXPECT_EQ(scale_of(h), 1.f) << "no history yet: s = 1";
  for (int i = 0; i < 40; ++i) {
    const float a = std::min(amaxes[i].item<float>(), 3e38f);
    seen.push_back(a);
    ops::fp8_history_ptr(h[0])->amax = bits(a);
    ops::roll_fp8_histories(h);
    float m = 0.f;
    for (size_t k = seen.size() > 16 ? seen.size() - 16 : 0; k < seen.size(); ++k) m = std::max(m, seen[k]);
    const auto* row = ops::fp8_history_ptr(h[0]);
    EXPECT_EQ(row->amax, 0u) << "the roll restarts the step's amax";
    EXPECT_EQ(row->amax_history[0], bits(a)) << "newest first";
    EXPECT_EQ(row->scale, reference_scale(m, 448.f)) << "step " << i << ", max of the window " << m;
    EXPECT_EQ(row->inv_scale, 1.f / row->scale);
  }
  // e5m2 histories take e5m2's max.
  EXPECT_EQ(scale_of(history_after({3.f}, torch::kFloat8_e5m2)), reference_scale(3.f, 57344.f));
  EXPECT_EQ(scale_of(history_after({0.f, 0.f}, torch::kFloat8_e4m3fn)), 1.f) << "amax 0: s = 1";
  EXPECT_EQ(scale_of(history_after({1e-40f}, torch::kFloat8_e4m3fn)), std::ldexp(1.f, 127)) << "subnormal: capped";
}

TEST(Fp8History, TheDecodeFactorIsExactAndAlignedForTheGemm) {
  auto h = ops::new_fp8_histories({torch::kFloat8_e4m3fn, torch::kFloat8_e5m2, torch::kFloat8_e4m3fn}, torch::kCPU);
  // cuBLASLt takes the view as its scale pointer: 128 bytes into the buffer per row, the buffer itself
  // as aligned as its allocator makes it (CUDA's: 512 bytes).
  for (int64_t i = 0; i < 3; ++i)
    EXPECT_EQ(ops::fp8_history_inv_scale(h[i]).storage_offset() * 4 % 128, 0) << "row " << i;
  for (int e = -126; e <= 127; ++e) EXPECT_EQ(kernels::fp8_inv_scale(std::ldexp(1.f, e)), std::ldexp(1.f, -e)) << e;
  EXPECT_TRUE(std::isnan(kernels::fp8_inv_scale(std::numeric_limits<float>::quiet_NaN())));
}

TEST(Fp8History, NonFiniteAmaxKeepsTheScaleNaNUntilItLeavesTheWindow) {
  for (float special : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> steps = {2.f, special};
    auto h = history_after(steps, torch::kFloat8_e4m3fn);
    EXPECT_TRUE(std::isnan(scale_of(h))) << special;
    EXPECT_TRUE(std::isnan(ops::fp8_history_inv_scale(h[0]).item<float>()));
    for (int i = 0; i < kernels::kFp8HistoryLen - 1; ++i) steps.push_back(1.f);  // it is the oldest of 16
    EXPECT_TRUE(std::isnan(scale_of(history_after(steps, torch::kFloat8_e4m3fn)))) << "still in the window";
    steps.push_back(1.f);
    EXPECT_EQ(scale_of(history_after(steps, torch::kFloat8_e4m3fn)), reference_scale(1.f, 448.f)) << "left it";
  }
}

TEST(Fp8History, DelayedCastFollowsTheDefinition) {
  for (auto fp8 : {torch::kFloat8_e4m3fn, torch::kFloat8_e5m2}) {
    const float max = fp8 == torch::kFloat8_e4m3fn ? 448.f : 57344.f;
    torch::manual_seed(4);
    auto x = (torch::randn({32, 48}) * 3).to(torch::kBFloat16);
    x.view(-1)[7] = 40.f;    // past the delayed scale: saturates
    x.view(-1)[8] = -40.f;
    x.view(-1)[9] = 1e-30f;  // underflows to 0
    auto h = history_after({10.f}, fp8);  // the last step's amax was 10; this step's is 40
    const float s = reference_scale(10.f, max);
    ASSERT_EQ(scale_of(h), s);
    auto q = ops::fp8_quantize_delayed(x, h[0], /*row_major=*/true, /*transposed=*/true);
    auto xf = x.to(torch::kFloat).contiguous();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double v = static_cast<double>(xf.data_ptr<float>()[i]) * s;  // exact: s a power of two
      const float c = static_cast<float>(std::max<double>(-max, std::min<double>(max, v)));
      const uint8_t want = fp8 == torch::kFloat8_e4m3fn ? c10::Float8_e4m3fn(c).x : c10::Float8_e5m2(c).x;
      ASSERT_EQ(q.data.view(torch::kUInt8).view(-1)[i].item<int>(), want) << "element " << i << " = " << v / s;
    }
    EXPECT_TRUE(torch::equal(q.data_t.view(torch::kUInt8), q.data.view(torch::kUInt8).t().contiguous()));
    EXPECT_EQ(q.data.to(torch::kFloat).view(-1)[7].item<float>(), max) << "saturated, not inf or NaN";
    EXPECT_EQ(q.inv_scale.item<float>(), 1.f / s);
    EXPECT_EQ(ops::fp8_history_ptr(h[0])->amax, bits(40.f)) << "this step's amax recorded for the next";
    // A stored inf or NaN: the decode factor (the history's, read by the GEMM) turns NaN.
    for (float special : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
      auto y = x.clone();
      y.view(-1)[3] = special;
      auto g = history_after({10.f}, fp8);
      auto qy = ops::fp8_quantize_delayed(y, g[0], true, false);
      EXPECT_TRUE(std::isnan(qy.inv_scale.item<float>())) << special;
      EXPECT_TRUE(std::isnan(ops::fp8_history_inv_scale(g[0]).item<float>()));
    }
    // Zeros with an empty history: s = 1, zeros out.
    auto z = ops::fp8_quantize_delayed(torch::zeros({16, 16}, torch::kBFloat16),
                                       ops::new_fp8_histories({fp8}, torch::kCPU)[0], true, false);
    EXPECT_EQ(z.data.view(torch::kUInt8).sum().item<int64_t>(), 0);
    EXPECT_EQ(z.inv_scale.item<float>(), 1.f);
  }
}

TEST(Fp8History, ASlotFoldsTheDynamicAmaxAndHandsItsFp8FormOnlyToItsTensor) {
  auto h = ops::new_fp8_histories({torch::kFloat8_e5m2}, torch::kCPU)[0];
  auto slot = ops::new_fp8_amax_slot();
  slot->attach_history(h, torch::kFloat8_e5m2, /*delayed=*/false);
  EXPECT_FALSE(slot->delayed());
  auto t = torch::randn({16, 32}, torch::kBFloat16);
  slot->record(t, torch::full({1}, static_cast<int32_t>(bits(5.f)), torch::kInt));
  slot->record(t, torch::full({1}, static_cast<int32_t>(bits(3.f)), torch::kInt));
  EXPECT_EQ(ops::fp8_history_ptr(h)->amax, bits(5.f)) << "the max of what was recorded";
  EXPECT_FALSE(slot->take_quantized(t).has_value()) << "nothing quantized recorded";

  slot->attach_history(h, torch::kFloat8_e5m2, /*delayed=*/true);
  EXPECT_TRUE(slot->delayed());
  ops::Fp8Tensor q;
  q.data = torch::zeros({16, 32}, torch::kFloat8_e5m2);
  q.data_t = torch::zeros({32, 16}, torch::kFloat8_e5m2);
  q.inv_scale = ops::fp8_history_inv_scale(h);
  slot->record_quantized(t, q);
  EXPECT_THROW(slot->take_quantized(t.clone()), c10::Error) << "another tensor: its memory was never written";
  auto got = slot->take_quantized(t.view({16, 32}));
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(got->data.is_same(q.data));
  EXPECT_FALSE(slot->take_quantized(t).has_value()) << "handed over once";
  slot->record_quantized(t, q);
  t.add_(1);  // written since: no longer the recorded tensor
  EXPECT_THROW(slot->take_quantized(t), c10::Error);
}

#ifdef LMSCALE_HAS_KERNELS
namespace {

bool cuda() { return torch::cuda::is_available(); }

// A CUDA history row whose last step's amax was `amax` (so s = the rule at amax), and its amax as the
// int32 bits the unfused cast takes (fp8_quantize with amax_bits: the same scale).
struct DelayedScale {
  torch::Tensor history, amax_bits;
};
DelayedScale delayed_scale(float amax, at::ScalarType fp8) {
  return {history_after({amax}, fp8).to(torch::kCUDA)[0],
          torch::full({1}, static_cast<int32_t>(bits(amax)), torch::dtype(torch::kInt).device(torch::kCUDA))};
}

void expect_same_bytes(const torch::Tensor& a, const torch::Tensor& b, const char* what) {
  EXPECT_TRUE(torch::equal(a.view(torch::kUInt8), b.view(torch::kUInt8))) << what;
}

void* stream() { return at::cuda::getCurrentCUDAStream().stream(); }

}  // namespace

TEST(Fp8HistoryGpu, RollKernelIsTheHostRoll) {
  if (!cuda()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(8);
  auto h = ops::new_fp8_histories({torch::kFloat8_e4m3fn, torch::kFloat8_e5m2, torch::kFloat8_e4m3fn}, torch::kCPU);
  auto amaxes = (torch::randn({3, kernels::kFp8HistoryLen + 1}) * 20).exp().contiguous();
  for (int i = 0; i < 3; ++i) {
    auto* row = ops::fp8_history_ptr(h[i]);
    for (int k = 0; k < kernels::kFp8HistoryLen; ++k) row->amax_history[k] = bits(amaxes[i][k].item<float>());
    row->amax = bits(amaxes[i][kernels::kFp8HistoryLen].item<float>());
  }
  ops::fp8_history_ptr(h[2])->amax_history[5] = 0x7fc00000u;  // a NaN in one history
  auto d = h.to(torch::kCUDA);
  ops::roll_fp8_histories(h);
  ops::roll_fp8_histories(d);
  EXPECT_TRUE(torch::equal(h, d.cpu()));
}

TEST(Fp8HistoryGpu, SwiGluGateWritesTheBytesOfTheCastWithTheSameScale) {
  if (!cuda()) GTEST_SKIP() << "no CUDA device";
  // rows 80 and F 208: multiples of 16, not of the 64×64 tile; a and b column blocks of one (rows, 2F).
  const int64_t rows = 80, F = 208;
  torch::manual_seed(9);
  auto opts = torch::dtype(torch::kBFloat16).device(torch::kCUDA);
  auto ab = torch::randn({rows, 2 * F}, opts) * 2;
  auto a = ab.narrow(1, 0, F), b = ab.narrow(1, F, F);
  auto dout = torch::randn({rows, F}, opts);
  kernels::SwiGluParams p;
  p.a = a.data_ptr();
  p.b = b.data_ptr();
  p.a_stride = p.b_stride = 2 * F;
  p.rows = rows;
  p.cols = F;
  // Unfused: the bf16 kernels, then the cast with a given amax.
  auto out = torch::empty({rows, F}, opts), da = torch::empty({rows, F}, opts), db = torch::empty({rows, F}, opts);
  auto bp = p;
  bp.out = out.data_ptr();
  kernels::run_swiglu_fwd(bp, stream());
  bp.dout = dout.data_ptr();
  bp.da = da.data_ptr();
  bp.db = db.data_ptr();
  bp.da_stride = bp.db_stride = F;
  kernels::run_swiglu_bwd(bp, stream());
  // Delayed scales below this step's amax (a third of it), so the largest values saturate.
  auto third = [](const torch::Tensor& t) { return t.abs().max().item<float>() / 3; };
  for (bool with_bf16 : {false, true}) {
    auto so = delayed_scale(third(out), torch::kFloat8_e4m3fn);
    auto sa = delayed_scale(third(da), torch::kFloat8_e5m2), sb = delayed_scale(third(db), torch::kFloat8_e5m2);
    auto e4 = opts.dtype(torch::kFloat8_e4m3fn), e5 = opts.dtype(torch::kFloat8_e5m2);
    auto qo = torch::empty({rows, F}, e4), qo_t = torch::empty({F, rows}, e4);
    auto qa = torch::empty({rows, F}, e5), qa_t = torch::empty({F, rows}, e5);
    auto qb = torch::empty({rows, F}, e5), qb_t = torch::empty({F, rows}, e5);
    auto out2 = torch::empty_like(out), da2 = torch::empty_like(da), db2 = torch::empty_like(db);
    auto fp = p;
    fp.out = with_bf16 ? out2.data_ptr() : nullptr;
    fp.out_fp8 = {ops::fp8_history_ptr(so.history), qo.data_ptr(), qo_t.data_ptr()};
    ASSERT_TRUE(kernels::swiglu_fp8_ok(fp, false));
    kernels::run_swiglu_fwd_fp8(fp, stream());
    fp.dout = dout.data_ptr();
    fp.da = with_bf16 ? da2.data_ptr() : nullptr;
    fp.db = with_bf16 ? db2.data_ptr() : nullptr;
    fp.da_stride = fp.db_stride = F;
    fp.da_fp8 = {ops::fp8_history_ptr(sa.history), qa.data_ptr(), qa_t.data_ptr()};
    fp.db_fp8 = {ops::fp8_history_ptr(sb.history), qb.data_ptr(), qb_t.data_ptr()};
    ASSERT_TRUE(kernels::swiglu_fp8_ok(fp, true));
    kernels::run_swiglu_bwd_fp8(fp, stream());
    struct Case {
      const char* name;
      torch::Tensor stored, q, q_t;
      DelayedScale s;
      at::ScalarType fp8;
    };
    for (const auto& c : {Case{"out", out, qo, qo_t, so, torch::kFloat8_e4m3fn},
                          Case{"da", da, qa, qa_t, sa, torch::kFloat8_e5m2},
                          Case{"db", db, qb, qb_t, sb, torch::kFloat8_e5m2}}) {
      auto want = ops::fp8_quantize(c.stored, c.fp8, true, true, c.s.amax_bits);
      expect_same_bytes(c.q, want.data, c.name);
      expect_same_bytes(c.q_t, want.data_t, c.name);
      EXPECT_TRUE(torch::equal(ops::fp8_history_inv_scale(c.s.history), want.inv_scale)) << c.name;
      EXPECT_EQ(ops::fp8_history_ptr(c.s.history.cpu())->amax, static_cast<uint32_t>(ops::fp8_amax(c.stored).item<int32_t>()))
          << c.name << ": this step's amax, for the next steps";
      const float max = c.fp8 == torch::kFloat8_e4m3fn ? 448.f : 57344.f;
      EXPECT_EQ(c.q.to(torch::kFloat).abs().max().item<float>(), max) << c.name << ": the largest values saturate";
    }
    if (with_bf16) {
      EXPECT_TRUE(torch::equal(out2, out));
      EXPECT_TRUE(torch::equal(da2, da));
      EXPECT_TRUE(torch::equal(db2, db));
    }
  }
  // A NaN stored: the decode factor the GEMM reads turns NaN.
  ab.view(-1)[5] = std::numeric_limits<float>::quiet_NaN();
  auto so = delayed_scale(1.f, torch::kFloat8_e4m3fn);
  auto qo = torch::empty({rows, F}, opts.dtype(torch::kFloat8_e4m3fn));
  auto fp = p;
  fp.out_fp8 = {ops::fp8_history_ptr(so.history), qo.data_ptr(), nullptr};
  kernels::run_swiglu_fwd_fp8(fp, stream());
  EXPECT_TRUE(std::isnan(ops::fp8_history_inv_scale(so.history).item<float>()));
}

TEST(Fp8HistoryGpu, RmsNormWritesTheBytesOfTheCastWithTheSameScale) {
  if (!cuda()) GTEST_SKIP() << "no CUDA device";
  const int64_t rows = 80, C = 208;  // multiples of 16, not of 64
  torch::manual_seed(11);
  auto opts = torch::dtype(torch::kBFloat16).device(torch::kCUDA);
  auto x = torch::randn({rows, C}, opts), res = torch::randn({rows, C}, opts);
  auto gain = torch::rand({C}, torch::dtype(torch::kFloat).device(torch::kCUDA)) * 3;
  auto h = torch::empty_like(x), y = torch::empty_like(x);
  auto rstd = torch::empty({rows}, torch::dtype(torch::kFloat).device(torch::kCUDA));
  kernels::AddRmsNormFwdParams p;
  p.x = x.data_ptr();
  p.residual = res.data_ptr();
  p.gain = gain.data_ptr<float>();
  p.h_out = h.data_ptr();
  p.rstd_out = rstd.data_ptr<float>();
  p.rows = rows;
  p.cols = static_cast<int>(C);
  p.x_dtype = p.residual_dtype = p.y_dtype = kernels::FusedDtype::kBF16;
  auto bp = p;
  bp.y_out = y.data_ptr();
  kernels::run_rms_norm_fwd(bp, stream());
  auto s = delayed_scale(y.abs().max().item<float>() / 3, torch::kFloat8_e4m3fn);
  auto e4 = opts.dtype(torch::kFloat8_e4m3fn);
  auto q = torch::empty({rows, C}, e4), q_t = torch::empty({C, rows}, e4);
  auto fp = p;
  fp.y_fp8 = {ops::fp8_history_ptr(s.history), q.data_ptr(), nullptr};
  kernels::run_rms_norm_fwd(fp, stream());
  kernels::run_fp8_transpose(q.data_ptr(), q_t.data_ptr(), rows, C, stream());
  auto want = ops::fp8_quantize(y, torch::kFloat8_e4m3fn, true, true, s.amax_bits);
  expect_same_bytes(q, want.data, "y");
  expect_same_bytes(q_t, want.data_t, "y transposed");
  EXPECT_EQ(q.to(torch::kFloat).abs().max().item<float>(), 448.f) << "the largest values saturate";
  EXPECT_EQ(ops::fp8_history_ptr(s.history.cpu())->amax, static_cast<uint32_t>(ops::fp8_amax(y).item<int32_t>()));
}

TEST(Fp8HistoryGpu, AdamWWritesTheWeightsBytesAndTheFinishTransposesAndRolls) {
  // The AdamW kernel under delayed scaling: the FP8 bytes of the updated bf16 copy with the history's
  // scale (the cast of the copy with that scale, bit for bit; saturating), the copy's amax into the
  // history; then fp8_weight_finish: the transpose, the decode factor it was written with, the roll.
  if (!cuda()) GTEST_SKIP() << "no CUDA device";
  const int64_t N = 48, K = 80;
  torch::manual_seed(12);
  auto f32 = torch::dtype(torch::kFloat).device(torch::kCUDA);
  // Two params stacked by rows into one FP8 weight (as packed q/k/v): 16 + 32 rows.
  std::vector<torch::Tensor> p = {torch::randn({16, K}, f32), torch::randn({32, K}, f32) * 3};
  std::vector<torch::Tensor> g = {torch::randn({16, K}, f32), torch::randn({32, K}, f32)};
  std::vector<torch::Tensor> m = {torch::zeros({16, K}, f32), torch::zeros({32, K}, f32)};
  std::vector<torch::Tensor> v = {torch::zeros({16, K}, f32), torch::zeros({32, K}, f32)};
  auto copy = torch::empty({N, K}, f32.dtype(torch::kBFloat16));
  std::vector<torch::Tensor> copies = {copy.narrow(0, 0, 16), copy.narrow(0, 16, 32)};
  auto s = delayed_scale(3.f, torch::kFloat8_e4m3fn);  // below the weights' amax: some saturate
  ops::Fp8Tensor w;
  w.data = torch::empty({N, K}, f32.dtype(torch::kFloat8_e4m3fn));
  w.data_t = torch::empty({K, N}, f32.dtype(torch::kFloat8_e4m3fn));
  w.inv_scale = torch::full({}, 7.f, f32);
  auto flat = w.data.view(-1);
  std::vector<ops::AdamWFp8Out> out = {{s.history, flat.narrow(0, 0, 16 * K)}, {s.history, flat.narrow(0, 16 * K, 32 * K)}};
  auto step = torch::zeros({}, f32);
  ops::fused_adamw_step(p, g, m, v, copies, {}, out, step, {1e-2, 0.9, 0.999, 1e-8, 0.01});
  auto want = ops::fp8_quantize(copy, torch::kFloat8_e4m3fn, true, true, s.amax_bits);
  expect_same_bytes(w.data, want.data, "weight");
  EXPECT_EQ(w.data.to(torch::kFloat).abs().max().item<float>(), 448.f) << "the largest values saturate";
  const auto amax = static_cast<uint32_t>(ops::fp8_amax(copy).item<int32_t>());
  EXPECT_EQ(ops::fp8_history_ptr(s.history.cpu())->amax, amax);
  ops::fp8_weight_finish(w, s.history);
  expect_same_bytes(w.data_t, want.data_t, "weight transposed");
  EXPECT_TRUE(torch::equal(w.inv_scale, want.inv_scale)) << "the decode factor it was written with";
  const auto row = s.history.cpu();
  EXPECT_EQ(ops::fp8_history_ptr(row)->amax_history[0], amax) << "rolled: this update's amax is the newest";
  EXPECT_EQ(ops::fp8_history_ptr(row)->amax, 0u);
  EXPECT_EQ(ops::fp8_history_ptr(row)->amax_history[1], bits(3.f));
}

TEST(Fp8HistoryGpu, RopeBackwardWritesTheBytesOfTheCastWithTheSameScale) {
  if (!cuda()) GTEST_SKIP() << "no CUDA device";
  const int B = 2, T = 40, H = 3, D = 16;  // B·T = 80, 3C = 144: not multiples of the 64×64 tile
  torch::manual_seed(10);
  auto opts = torch::dtype(torch::kBFloat16).device(torch::kCUDA);
  auto dq = torch::randn({B, H, T, D}, opts), dk = torch::randn({B, H, T, D}, opts) * 4,
       dv = torch::randn({B, H, T, D}, opts);
  auto angle = torch::rand({T, D / 2}, torch::dtype(torch::kFloat).device(torch::kCUDA)) * 6;
  auto rotation = torch::stack({angle.cos(), angle.sin()}, -1).contiguous();
  kernels::RopeQkvParams p;
  p.q = dq.data_ptr();
  p.k = dk.data_ptr();
  p.v = dv.data_ptr();
  p.rotation = rotation.data_ptr<float>();
  p.batch = B;
  p.seqlen = T;
  p.heads = H;
  p.head_dim = D;
  auto dqkv = torch::empty({B * T, 3 * H * D}, opts);
  auto bp = p;
  bp.qkv_grad = dqkv.data_ptr();
  kernels::run_rope_qkv_bwd(bp, stream());
  auto s = delayed_scale(dqkv.abs().max().item<float>() / 3, torch::kFloat8_e5m2);
  auto e5 = opts.dtype(torch::kFloat8_e5m2);
  auto q = torch::empty({B * T, 3 * H * D}, e5), q_t = torch::empty({3 * H * D, B * T}, e5);
  auto dqkv2 = torch::empty_like(dqkv);
  auto fp = p;
  fp.qkv_grad = dqkv2.data_ptr();
  fp.qkv_grad_fp8 = {ops::fp8_history_ptr(s.history), q.data_ptr(), q_t.data_ptr()};
  ASSERT_TRUE(kernels::rope_qkv_fp8_ok(fp));
  kernels::run_rope_qkv_bwd_fp8(fp, stream());
  EXPECT_TRUE(torch::equal(dqkv2, dqkv)) << "the bf16 values are the plain kernel's";
  auto want = ops::fp8_quantize(dqkv, torch::kFloat8_e5m2, true, true, s.amax_bits);
  expect_same_bytes(q, want.data, "dqkv");
  expect_same_bytes(q_t, want.data_t, "dqkv transposed");
  EXPECT_EQ(ops::fp8_history_ptr(s.history.cpu())->amax, static_cast<uint32_t>(ops::fp8_amax(dqkv).item<int32_t>()));
}
#endif

}  // namespace lmscale
