// Tiled FlashAttention-2 forward/backward in ATen; see flash_reference.h. Written as the algorithm of
// docs/spec.md §3 (online softmax over key tiles, recomputation in backward), not as one big softmax, so
// that it checks the algorithm the kernels implement and not merely the attention formula.
//
// Softmax runs in the log2 domain with exp2, as in the kernels. It also keeps MKL's vector math out of
// the reference: libtorch sends at::exp/at::log on large CPU tensors to MKL VML, whose threaded
// first call in a loaded process returned fp64 exp with 3.3e-9 relative error on about half the
// elements (3 processes in 150, 2-core machine); at::exp2 is ATen's own vectorised code.
#include "ops/flash_reference.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace lmscale::ops {
namespace {

constexpr double kLog2e = 1.4426950408889634074;  // log2(e)
constexpr double kLn2 = 0.6931471805599453094;    // ln(2)

at::ScalarType compute_dtype(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// Causal mask of the (rows [i0, i0+bq) x cols [j0, j0+bk)) block: true where key > query.
at::Tensor causal_mask(int64_t i0, int64_t bq, int64_t j0, int64_t bk, const at::Device& device) {
  auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  auto rows = at::arange(i0, i0 + bq, opts).unsqueeze(-1);
  auto cols = at::arange(j0, j0 + bk, opts).unsqueeze(0);
  return cols > rows;
}

// Whether any key of [j0, j0+bk) lies above the diagonal for some query of [i0, i0+bq).
bool crosses_diagonal(int64_t i0, int64_t j0, int64_t bk) { return j0 + bk - 1 > i0; }

}  // namespace

std::tuple<at::Tensor, at::Tensor> flash_reference_forward(const at::Tensor& q, const at::Tensor& k,
                                                           const at::Tensor& v, bool is_causal, int64_t tile) {
  const auto cdt = compute_dtype(q);
  const auto qc = q.to(cdt), kc = k.to(cdt), vc = v.to(cdt);
  const int64_t Nq = q.size(-2), Nk = k.size(-2);
  const double scale_log2 = kLog2e / std::sqrt(static_cast<double>(q.size(-1)));
  constexpr double kInf = std::numeric_limits<double>::infinity();

  std::vector<at::Tensor> o_tiles, l_tiles;
  for (int64_t i0 = 0; i0 < Nq; i0 += tile) {
    const int64_t bq = std::min(tile, Nq - i0);
    auto qi = qc.narrow(-2, i0, bq);
    auto oi = at::zeros_like(qi);
    auto lead = qi.sizes().vec();
    lead.pop_back();  // (..., bq)
    auto l = at::zeros(lead, qi.options());
    auto m = at::full(lead, -kInf, qi.options());
    // Causal: key tiles past the query tile's last row are never visited (Note [causal tiles]).
    const int64_t k_end = is_causal ? std::min(Nk, i0 + bq) : Nk;
    for (int64_t j0 = 0; j0 < k_end; j0 += tile) {
      const int64_t bk = std::min(tile, k_end - j0);
      // Scores times log2(e): (..., bq, bk).
      auto s = at::matmul(qi, kc.narrow(-2, j0, bk).transpose(-2, -1)) * scale_log2;
      if (is_causal && crosses_diagonal(i0, j0, bk)) s = s.masked_fill(causal_mask(i0, bq, j0, bk, s.device()), -kInf);
      auto m_new = at::maximum(m, std::get<0>(s.max(-1)));
      // A row with every key so far masked keeps m = -inf; subtract 0 instead so exp stays finite.
      auto m_safe = at::where(at::isinf(m_new), at::zeros_like(m_new), m_new);
      auto p = at::exp2(s - m_safe.unsqueeze(-1));
      auto correction = at::exp2(m - m_safe);
      l = correction * l + p.sum(-1);
      // P rounded to V's dtype (what the tensor-core matmul consumes), accumulated in the compute dtype.
      auto pv = at::matmul(p.to(v.scalar_type()).to(cdt), vc.narrow(-2, j0, bk));
      oi = correction.unsqueeze(-1) * oi + pv;
      m = m_new;
    }
    o_tiles.push_back(oi / l.unsqueeze(-1));
    l_tiles.push_back((m + at::log2(l)) * kLn2);  // back to natural log; l has one value per row
  }
  auto O = at::cat(o_tiles, -2).to(q.scalar_type());
  auto L = at::cat(l_tiles, -1);
  if (cdt != at::kDouble) L = L.to(at::kFloat);
  return {O, L};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_reference_backward(const at::Tensor& q, const at::Tensor& k,
                                                                        const at::Tensor& v, const at::Tensor& o,
                                                                        const at::Tensor& L, const at::Tensor& dout,
                                                                        bool is_causal, int64_t tile) {
  const auto cdt = compute_dtype(q);
  const auto qc = q.to(cdt), kc = k.to(cdt), vc = v.to(cdt), doc = dout.to(cdt);
  const int64_t Nq = q.size(-2), Nk = k.size(-2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  constexpr double kInf = std::numeric_limits<double>::infinity();

  const auto L_log2 = L.to(cdt) * kLog2e;  // L in the log2 domain
  const auto Dsum = (doc * o.to(cdt)).sum(-1);  // (..., Nq)
  auto dq = at::zeros_like(qc), dk = at::zeros_like(kc), dv = at::zeros_like(vc);
  for (int64_t j0 = 0; j0 < Nk; j0 += tile) {
    const int64_t bk = std::min(tile, Nk - j0);
    auto kj = kc.narrow(-2, j0, bk), vj = vc.narrow(-2, j0, bk);
    auto dkj = dk.narrow(-2, j0, bk), dvj = dv.narrow(-2, j0, bk);
    // Causal: queries before j0 see none of these keys; start at the query tile holding row j0.
    const int64_t i_first = is_causal ? (j0 / tile) * tile : 0;
    for (int64_t i0 = i_first; i0 < Nq; i0 += tile) {
      const int64_t bq = std::min(tile, Nq - i0);
      auto qi = qc.narrow(-2, i0, bq), doi = doc.narrow(-2, i0, bq);
      auto s = at::matmul(qi, kj.transpose(-2, -1)) * (scale * kLog2e);  // (..., bq, bk), log2 domain
      if (is_causal && crosses_diagonal(i0, j0, bk)) s = s.masked_fill(causal_mask(i0, bq, j0, bk, s.device()), -kInf);
      auto p = at::exp2(s - L_log2.narrow(-1, i0, bq).unsqueeze(-1));
      dvj.add_(at::matmul(p.transpose(-2, -1), doi));
      auto dp = at::matmul(doi, vj.transpose(-2, -1));
      auto ds = p * (dp - Dsum.narrow(-1, i0, bq).unsqueeze(-1));
      dq.narrow(-2, i0, bq).add_(at::matmul(ds, kj) * scale);
      dkj.add_(at::matmul(ds.transpose(-2, -1), qi) * scale);
    }
  }
  return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type())};
}

}  // namespace lmscale::ops
