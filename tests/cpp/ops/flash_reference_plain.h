// Plain attention in fp64 with the mask written out entry by entry, for the flash attention tests: built
// from FlashAttention's definition of the mask (query i sees key j iff i + shift - left <= j <= i + shift +
// right) without the library's FlashMask arithmetic, K/V heads repeated for grouped queries, a row that sees
// no key giving 0. Differentiable, so autograd gives the gradients to compare with.
#pragma once
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace lmscale::ops::test {

struct PlainMask {
  bool causal = false;
  bool bottom_right = false;
  int64_t left = -1, right = -1;
};

inline std::string describe(const PlainMask& m) {
  return std::string(m.causal ? "causal " : "") + (m.bottom_right ? "bottom-right " : "top-left ") + "window (" +
         std::to_string(m.left) + ", " + std::to_string(m.right) + ")";
}

// (nq, nk) bool, true where query i sees key j.
inline torch::Tensor explicit_mask(int64_t nq, int64_t nk, const PlainMask& m) {
  auto mask = torch::zeros({nq, nk}, torch::kBool);
  auto a = mask.accessor<bool, 2>();
  const int64_t shift = m.bottom_right ? nk - nq : 0;
  const int64_t right = m.causal ? 0 : m.right;
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t j = 0; j < nk; ++j)
      a[i][j] = (m.left < 0 || j >= i + shift - m.left) && (right < 0 || j <= i + shift + right);
  return mask;
}

// q (..., Hq, Nq, D), k, v (..., Hkv, Nk, D) -> (O, L): O 0 and L +inf on rows that see no key.
inline std::pair<torch::Tensor, torch::Tensor> plain_attention(const torch::Tensor& q, torch::Tensor k,
                                                               torch::Tensor v, const torch::Tensor& mask,
                                                               double scale) {
  if (q.dim() >= 3 && q.size(-3) != k.size(-3)) {
    const int64_t group = q.size(-3) / k.size(-3);
    k = k.repeat_interleave(group, -3);
    v = v.repeat_interleave(group, -3);
  }
  const auto inf = std::numeric_limits<double>::infinity();
  if (k.size(-2) == 0) {  // no keys at all (an empty sequence of a packed batch)
    auto lead = q.sizes().vec();
    lead.pop_back();
    return {q * 0, torch::full(lead, inf, q.options())};
  }
  const auto seen = mask.to(q.device());
  const auto any = seen.any(-1, /*keepdim=*/true);  // (Nq, 1)
  auto s = torch::matmul(q, k.transpose(-2, -1)) * scale;
  s = s.masked_fill(seen.logical_not(), -inf);
  s = torch::where(any, s, torch::zeros_like(s));  // a row with no key: finite, zeroed below
  auto p = torch::softmax(s, -1) * seen.to(q.scalar_type());
  auto o = torch::matmul(p, v);
  // L read off log_softmax at the row's first visible key: torch::logsumexp goes through at::exp, which MKL's
  // vector math may return with ~3e-9 relative error in fp64 (see flash_reference.cpp).
  auto first = seen.to(torch::kLong).argmax(-1, /*keepdim=*/true).expand_as(s.select(-1, 0).unsqueeze(-1));
  auto lse = (s.gather(-1, first) - torch::log_softmax(s, -1).gather(-1, first)).squeeze(-1);
  lse = torch::where(any.squeeze(-1), lse, torch::full_like(lse, inf));
  return {o, lse.detach()};
}

inline double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.numel() == 0 && b.numel() == 0) return 0.0;
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// Max difference where both are finite, and whether their +inf entries agree.
inline double max_diff_lse(const torch::Tensor& a, const torch::Tensor& b) {
  auto a64 = a.to(torch::kDouble), b64 = b.to(torch::kDouble);
  if (!torch::equal(torch::isinf(a64), torch::isinf(b64))) return std::numeric_limits<double>::infinity();
  auto finite = torch::isfinite(a64);
  if (finite.sum().item<int64_t>() == 0) return 0.0;
  return (a64.masked_select(finite) - b64.masked_select(finite)).abs().max().item<double>();
}

}  // namespace lmscale::ops::test
