// The FP8 quantization written from its definition, in fp64, for the tests of ops/fp8_quantize.h and
// model/fp8_linear.h: the power-of-two scale found by doubling and halving, and rounding to the nearest
// FP8 value (ties to the even bit pattern) by searching all 256 patterns. Slow, obviously right.
#pragma once
#include <torch/torch.h>

#include <cmath>

namespace lmscale::testing {

constexpr auto kE4M3 = torch::kFloat8_e4m3fn;
constexpr auto kE5M2 = torch::kFloat8_e5m2;

inline double format_max(torch::ScalarType f) { return f == kE4M3 ? 448.0 : 57344.0; }

// 2^floor(log2(max / amax)) by doubling and halving (exact in fp64), capped at 2^127; 1 for amax 0.
inline double reference_scale(double amax, torch::ScalarType f) {
  if (amax == 0) return 1;
  double s = 1;
  while (amax * s * 2 <= format_max(f) && s < std::ldexp(1.0, 127)) s *= 2;
  while (amax * s > format_max(f)) s /= 2;
  return s;
}

// Every finite value of the format, as fp64, ascending (from the 256 bit patterns).
inline torch::Tensor all_values(torch::ScalarType f) {
  auto bytes = torch::arange(256, torch::kInt).to(torch::kUInt8);
  auto v = bytes.view(f).to(torch::kDouble);
  v = v.masked_select(torch::isfinite(v));
  return std::get<0>(at::_unique(v, /*sorted=*/true));
}

// x·s rounded to the nearest representable value, ties to the one with an even last mantissa bit
// (the even one sits at an even index in the sorted positive list, mirrored for negatives).
inline torch::Tensor reference_quantize(const torch::Tensor& x, double s, torch::ScalarType f) {
  auto values = all_values(f);
  auto y = x.to(torch::kDouble) * s;
  auto dist = (y.reshape({-1, 1}) - values.reshape({1, -1})).abs();
  auto best = std::get<0>(dist.min(1, /*keepdim=*/true));
  auto ties = dist.eq(best);
  // Among ties pick the value whose bit pattern is even (last mantissa bit 0).
  auto pattern_even = values.to(f).view(torch::kUInt8).remainder(2).eq(0);
  auto pick = (ties & pattern_even.reshape({1, -1})).to(torch::kInt).argmax(1);
  auto only = ties.to(torch::kInt).sum(1).eq(1);
  pick = torch::where(only, ties.to(torch::kInt).argmax(1), pick);
  return values.index_select(0, pick).reshape(x.sizes());
}

// (x quantized) · (1/s) in fp64, with s from x's own amax: what the FP8 GEMM reads for x.
inline torch::Tensor reference_dequantized(const torch::Tensor& x, torch::ScalarType f) {
  const double s = reference_scale(x.to(torch::kDouble).abs().max().item<double>(), f);
  return reference_quantize(x, s, f) / s;
}

}  // namespace lmscale::testing
