// FP8 per-tensor quantization (ops/fp8_quantize.h, kernels/fp8_scale.h): the scale rule against its
// definition computed in fp64, the edge cases (amax 0, tiny, inf, NaN), the CPU quantizer against a
// reference written from the definition (x·s rounded to the nearest FP8 value, ties to even, found
// by searching every FP8 value in fp64), and on a GPU the cast kernels bit for bit against the CPU
// path, both layouts, shapes that are not multiples of the 64-wide tile.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "ops/fp8_quantize.h"
#include "support/fp8_reference.h"

namespace lmscale {
namespace {

using testing::format_max;
using testing::kE4M3;
using testing::kE5M2;
using testing::reference_quantize;
using testing::reference_scale;

TEST(Fp8Scale, IsTheLargestPowerOfTwoThatFits) {
  for (auto f : {kE4M3, kE5M2})
    for (double amax : {1.0, 0.3, 448.0, 449.0, 57344.0, 1e-3, 3.1e-20, 7e5, 1e30, 224.0, 223.99}) {
      const float s = ops::fp8_scale(static_cast<float>(amax), f);
      const double a = static_cast<float>(amax);
      EXPECT_EQ(s, reference_scale(a, f)) << amax;
      EXPECT_LE(a * s, format_max(f)) << amax;
      EXPECT_GT(a * s * 2, format_max(f)) << amax;
    }
}

TEST(Fp8Scale, EdgeCasesAreSafeOrLoud) {
  for (auto f : {kE4M3, kE5M2}) {
    EXPECT_EQ(ops::fp8_scale(0.f, f), 1.f);  // all zeros: any scale works, 1 is safe
    // Tiny and subnormal amax: the scale stops at 2^127 instead of overflowing to inf.
    EXPECT_EQ(ops::fp8_scale(std::numeric_limits<float>::denorm_min(), f), std::ldexp(1.f, 127));
    EXPECT_TRUE(std::isfinite(ops::fp8_scale(std::numeric_limits<float>::min(), f)));
    EXPECT_TRUE(std::isnan(ops::fp8_scale(INFINITY, f)));
    EXPECT_TRUE(std::isnan(ops::fp8_scale(NAN, f)));
    EXPECT_EQ(ops::fp8_scale(std::numeric_limits<float>::max(), f),
              static_cast<float>(reference_scale(std::numeric_limits<float>::max(), f)));
  }
}

TEST(Fp8Quantize, CpuMatchesTheDefinition) {
  torch::manual_seed(81);
  for (auto f : {kE4M3, kE5M2})
    for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
      // Values over many binades (log-uniform magnitudes), signs mixed, plus exact zeros.
      auto mag = torch::exp(torch::empty({48, 32}).uniform_(-12, 3));
      auto x = (mag * torch::randn({48, 32}).sign()).to(dtype);
      x.index_put_({0, 0}, 0.0);
      auto q = ops::fp8_quantize(x, f, /*row_major=*/true, /*transposed=*/true);
      const double amax = x.to(torch::kDouble).abs().max().item<double>();
      const double s = reference_scale(amax, f);
      ASSERT_EQ(q.data.scalar_type(), f);
      EXPECT_EQ(q.inv_scale.item<float>(), static_cast<float>(1.0 / s));  // exact: s is a power of two
      auto want = reference_quantize(x, s, f);
      EXPECT_TRUE(torch::equal(q.data.to(torch::kDouble), want)) << c10::toString(f) << " " << c10::toString(dtype);
      EXPECT_TRUE(torch::equal(q.data_t.to(torch::kDouble), want.t())) << "transposed";
      // Dequantized error: half a unit in the last place of each value, at most 2^-4 (e4m3) / 2^-3 (e5m2)
      // relative, for values above the format's smallest normal.
      auto deq = q.data.to(torch::kDouble) * q.inv_scale.item<double>();
      auto normal = x.to(torch::kDouble).abs() * s >= (f == kE4M3 ? std::ldexp(1.0, -6) : std::ldexp(1.0, -14));
      auto rel = ((deq - x.to(torch::kDouble)).abs() / x.to(torch::kDouble).abs()).masked_select(normal);
      EXPECT_LE(rel.max().item<double>(), f == kE4M3 ? 1.0 / 16 : 1.0 / 8);
    }
}

TEST(Fp8Quantize, NonFiniteInputMakesEverythingNaN) {
  for (auto f : {kE4M3, kE5M2})
    for (double bad : {double(INFINITY), -double(INFINITY), double(NAN)}) {
      auto x = torch::randn({16, 16});
      x.index_put_({3, 5}, bad);
      auto q = ops::fp8_quantize(x, f, true, true);
      EXPECT_TRUE(std::isnan(q.inv_scale.item<float>()));
      EXPECT_TRUE(q.data.to(torch::kFloat).isnan().all().item<bool>()) << "no element may look valid";
    }
}

TEST(Fp8Quantize, AllZerosStayZero) {
  auto q = ops::fp8_quantize(torch::zeros({16, 32}, torch::kBFloat16), kE4M3, true, true);
  EXPECT_EQ(q.inv_scale.item<float>(), 1.f);
  EXPECT_TRUE(q.data.to(torch::kFloat).eq(0).all().item<bool>());
}

TEST(Fp8Quantize, RejectsWhatItCannotCast) {
  EXPECT_THROW(ops::fp8_quantize(torch::randn({16}), kE4M3, true, false), c10::Error);
  EXPECT_THROW(ops::fp8_quantize(torch::randn({16, 16}, torch::kDouble), kE4M3, true, false), c10::Error);
  EXPECT_THROW(ops::fp8_quantize(torch::randn({16, 16}), torch::kBFloat16, true, false), c10::Error);
}

TEST(Fp8QuantizeKernel, MatchesTheCpuPathBitForBit) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(82);
  for (auto f : {kE4M3, kE5M2})
    for (auto dtype : {torch::kFloat, torch::kBFloat16})
      for (auto shape : {std::vector<int64_t>{48, 80}, {2048, 1600}, {16, 4096}, {4800, 16}}) {
        auto mag = torch::exp(torch::empty(shape).uniform_(-14, 4));
        auto x = (mag * torch::randn(shape).sign()).to(dtype);
        auto want = ops::fp8_quantize(x, f, true, true);
        auto got = ops::fp8_quantize(x.cuda(), f, true, true);
        const std::string what = std::string(c10::toString(f)) + " " + c10::toString(dtype) + " " +
                                 std::to_string(shape[0]) + "x" + std::to_string(shape[1]);
        EXPECT_EQ(got.inv_scale.item<float>(), want.inv_scale.item<float>()) << what;
        EXPECT_TRUE(torch::equal(got.data.cpu().view(torch::kUInt8), want.data.view(torch::kUInt8))) << what;
        EXPECT_TRUE(torch::equal(got.data_t.cpu().view(torch::kUInt8), want.data_t.view(torch::kUInt8))) << what;
      }
  // Non-finite on the GPU: NaN everywhere, as on the CPU; zeros: scale 1.
  auto x = torch::randn({64, 64}, torch::kCUDA);
  x.index_put_({7, 9}, INFINITY);
  auto q = ops::fp8_quantize(x, kE4M3, true, true);
  EXPECT_TRUE(std::isnan(q.inv_scale.item<float>()));
  EXPECT_TRUE(q.data.to(torch::kFloat).isnan().all().item<bool>());
  auto z = ops::fp8_quantize(torch::zeros({32, 32}, torch::kCUDA), kE5M2, true, false);
  EXPECT_EQ(z.inv_scale.item<float>(), 1.f);
}

}  // namespace
}  // namespace lmscale
