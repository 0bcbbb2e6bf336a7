// Tiled FlashAttention-2 forward/backward in ATen; see flash_reference.h. Written as the algorithm of
// docs/spec.md §3 (online softmax over key tiles, recomputation in backward), not as one big softmax, so
// that it checks the algorithm the kernels implement and not merely the attention formula: tiles outside
// the mask (visible_keys / visible_queries) are never visited and only tiles the mask cuts are masked,
// as the kernels will do (Note [causal tiles] in flash_fwd_kernel.cuh is the square causal case).
//
// Grouped-query attention keeps K and V at their own head count: q is viewed as (..., Hkv, G, Nq, D) and k,
// v as (..., Hkv, 1, Nk, D), so every matmul broadcasts one K/V head over its G query heads (nothing is
// repeated), and the backward sums dK and dV over that dim.
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
constexpr double kInf = std::numeric_limits<double>::infinity();

at::ScalarType compute_dtype(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

double softmax_scale(const at::Tensor& q, std::optional<double> scale) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
}

// The grouped-query views: q (..., Hq, N, D) -> (..., Hkv, G, N, D), k and v (..., Hkv, N, D) ->
// (..., Hkv, 1, N, D). 2-D inputs have no head dim and stay as they are.
bool has_heads(const at::Tensor& q) { return q.dim() >= 3; }
at::Tensor group_q(const at::Tensor& q, int64_t kv_heads) {
  return has_heads(q) ? q.unflatten(-3, {kv_heads, q.size(-3) / kv_heads}) : q;
}
at::Tensor group_kv(const at::Tensor& k) { return has_heads(k) ? k.unsqueeze(-3) : k; }
// A per-query-head K/V gradient (..., Hkv, G, n, D) summed over the group to (..., Hkv, 1, n, D).
at::Tensor sum_group(const at::Tensor& t, bool grouped) { return grouped ? t.sum(-3, /*keepdim=*/true) : t; }

// Of the (rows [i0, i0+bq) x keys [j0, j0+bk)) block, true where the query does not see the key. Called
// only for blocks the mask cuts (!mask_free), so some side of the mask is bounded.
at::Tensor hidden_mask(const FlashMask& m, int64_t nq, int64_t nk, int64_t i0, int64_t bq, int64_t j0, int64_t bk,
                       const at::Device& device) {
  auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  auto diag = at::arange(i0, i0 + bq, opts).unsqueeze(-1) + m.shift(nq, nk);  // each row's diagonal key
  auto keys = at::arange(j0, j0 + bk, opts).unsqueeze(0);
  at::Tensor hidden;
  if (m.right()) hidden = keys > diag + *m.right();
  if (m.left()) hidden = hidden.defined() ? (hidden | (keys < diag - *m.left())) : (keys < diag - *m.left());
  return hidden;
}

// The first tile of the tile grid (multiples of tile from 0, as the kernels' blocks) holding index i.
int64_t tile_start(int64_t i, int64_t tile) { return (i / tile) * tile; }

}  // namespace

std::tuple<at::Tensor, at::Tensor> flash_reference_forward(const at::Tensor& q, const at::Tensor& k,
                                                           const at::Tensor& v, const FlashMask& mask,
                                                           std::optional<double> scale, int64_t tile) {
  const auto cdt = compute_dtype(q);
  const int64_t kv_heads = has_heads(k) ? k.size(-3) : 1;
  const auto qc = group_q(q.to(cdt), kv_heads), kc = group_kv(k.to(cdt)), vc = group_kv(v.to(cdt));
  const int64_t Nq = q.size(-2), Nk = k.size(-2);
  const double scale_log2 = softmax_scale(q, scale) * kLog2e;

  std::vector<at::Tensor> o_tiles, l_tiles;
  for (int64_t i0 = 0; i0 < Nq; i0 += tile) {
    const int64_t bq = std::min(tile, Nq - i0);
    auto qi = qc.narrow(-2, i0, bq);
    auto oi = at::zeros_like(qi);
    auto lead = qi.sizes().vec();
    lead.pop_back();  // (..., bq)
    auto l = at::zeros(lead, qi.options());
    auto m = at::full(lead, -kInf, qi.options());
    // Only the key tiles some row of this tile sees are visited.
    const auto keys = visible_keys(mask, Nq, Nk, i0, i0 + bq);
    for (int64_t j0 = tile_start(keys.begin, tile); !keys.empty() && j0 < keys.end; j0 += tile) {
      const int64_t bk = std::min(tile, Nk - j0);
      // Scores times log2(e): (..., bq, bk).
      auto s = at::matmul(qi, kc.narrow(-2, j0, bk).transpose(-2, -1)) * scale_log2;
      if (!mask_free(mask, Nq, Nk, i0, i0 + bq, j0, j0 + bk))
        s = s.masked_fill(hidden_mask(mask, Nq, Nk, i0, bq, j0, bk, s.device()), -kInf);
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
    // A row that saw no key (l = 0, its O still 0): O = 0 and L = +inf, which zeroes its P in backward.
    const auto seen = l > 0;
    o_tiles.push_back(oi / at::where(seen, l, at::ones_like(l)).unsqueeze(-1));
    l_tiles.push_back(at::where(seen, (m + at::log2(l)) * kLn2, at::full_like(l, kInf)));  // natural log
  }
  auto O = at::cat(o_tiles, -2), L = at::cat(l_tiles, -1);
  if (has_heads(q)) O = O.flatten(-4, -3), L = L.flatten(-3, -2);  // back to (..., Hq, Nq[, D])
  O = O.to(q.scalar_type());
  if (cdt != at::kDouble) L = L.to(at::kFloat);
  return {O, L};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_reference_backward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o, const at::Tensor& L,
    const at::Tensor& dout, const FlashMask& mask, std::optional<double> scale, int64_t tile) {
  const auto cdt = compute_dtype(q);
  const bool grouped = has_heads(q);
  const int64_t kv_heads = grouped ? k.size(-3) : 1;
  const auto qc = group_q(q.to(cdt), kv_heads), kc = group_kv(k.to(cdt)), vc = group_kv(v.to(cdt));
  const auto doc = group_q(dout.to(cdt), kv_heads);
  const int64_t Nq = q.size(-2), Nk = k.size(-2);
  const double sc = softmax_scale(q, scale);

  // L in the log2 domain, and D = rowsum(dO ⊙ O), both (..., Hkv, G, Nq). A row that saw no key has
  // L = +inf: its P is exp2(s - inf) = 0 whatever s is, so it passes no gradient.
  const auto L_log2 = (grouped ? L.unflatten(-2, {kv_heads, q.size(-3) / kv_heads}) : L).to(cdt) * kLog2e;
  const auto Dsum = (doc * group_q(o.to(cdt), kv_heads)).sum(-1);
  auto dq = at::zeros_like(qc), dk = at::zeros_like(kc), dv = at::zeros_like(vc);
  for (int64_t j0 = 0; j0 < Nk; j0 += tile) {
    const int64_t bk = std::min(tile, Nk - j0);
    auto kj = kc.narrow(-2, j0, bk), vj = vc.narrow(-2, j0, bk);
    auto dkj = dk.narrow(-2, j0, bk), dvj = dv.narrow(-2, j0, bk);
    // Only the query tiles holding a row that sees some key of this tile.
    const auto rows = visible_queries(mask, Nq, Nk, j0, j0 + bk);
    for (int64_t i0 = tile_start(rows.begin, tile); !rows.empty() && i0 < rows.end; i0 += tile) {
      const int64_t bq = std::min(tile, Nq - i0);
      auto qi = qc.narrow(-2, i0, bq), doi = doc.narrow(-2, i0, bq);
      auto s = at::matmul(qi, kj.transpose(-2, -1)) * (sc * kLog2e);  // (..., bq, bk), log2 domain
      if (!mask_free(mask, Nq, Nk, i0, i0 + bq, j0, j0 + bk))
        s = s.masked_fill(hidden_mask(mask, Nq, Nk, i0, bq, j0, bk, s.device()), -kInf);
      auto p = at::exp2(s - L_log2.narrow(-1, i0, bq).unsqueeze(-1));
      dvj.add_(sum_group(at::matmul(p.transpose(-2, -1), doi), grouped));
      auto dp = at::matmul(doi, vj.transpose(-2, -1));
      auto ds = p * (dp - Dsum.narrow(-1, i0, bq).unsqueeze(-1));
      dq.narrow(-2, i0, bq).add_(at::matmul(ds, kj) * sc);
      dkj.add_(sum_group(at::matmul(ds.transpose(-2, -1), qi), grouped) * sc);
    }
  }
  if (grouped) dq = dq.flatten(-4, -3), dk = dk.squeeze(-3), dv = dv.squeeze(-3);
  return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type())};
}

std::tuple<at::Tensor, at::Tensor> flash_reference_forward(const at::Tensor& q, const at::Tensor& k,
                                                           const at::Tensor& v, bool is_causal, int64_t tile) {
  return flash_reference_forward(q, k, v, FlashMask{is_causal}, std::nullopt, tile);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_reference_backward(const at::Tensor& q, const at::Tensor& k,
                                                                        const at::Tensor& v, const at::Tensor& o,
                                                                        const at::Tensor& L, const at::Tensor& dout,
                                                                        bool is_causal, int64_t tile) {
  return flash_reference_backward(q, k, v, o, L, dout, FlashMask{is_causal}, std::nullopt, tile);
}

namespace {
// cu_seqlens as host int64 values (the reference's loop runs on the host; a CUDA tensor is read once).
std::vector<int64_t> host_offsets(const at::Tensor& cu_seqlens) {
  auto c = cu_seqlens.to(at::kCPU, at::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

// Sequence b's rows of a packed (total, H, D) tensor as (H, n, D).
at::Tensor sequence(const at::Tensor& t, const std::vector<int64_t>& cu, size_t b) {
  return t.narrow(0, cu[b], cu[b + 1] - cu[b]).transpose(0, 1);
}
}  // namespace

std::tuple<at::Tensor, at::Tensor> flash_reference_varlen_forward(const at::Tensor& q, const at::Tensor& k,
                                                                  const at::Tensor& v, const at::Tensor& cu_seqlens_q,
                                                                  const at::Tensor& cu_seqlens_k,
                                                                  const FlashMask& mask, std::optional<double> scale,
                                                                  int64_t tile) {
  const auto cq = host_offsets(cu_seqlens_q), ck = host_offsets(cu_seqlens_k);
  const auto l_dtype = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  auto O = at::zeros(q.sizes(), q.options());
  auto L = at::full({q.size(1), q.size(0)}, kInf, q.options().dtype(l_dtype));
  for (size_t b = 0; b + 1 < cq.size(); ++b) {
    if (cq[b + 1] == cq[b]) continue;  // no queries; a sequence with no keys gives O = 0, L = +inf
    auto [ob, lb] = flash_reference_forward(sequence(q, cq, b), sequence(k, ck, b), sequence(v, ck, b), mask, scale,
                                            tile);
    sequence(O, cq, b).copy_(ob);
    L.narrow(1, cq[b], cq[b + 1] - cq[b]).copy_(lb);
  }
  return {O, L};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_reference_varlen_backward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o, const at::Tensor& L,
    const at::Tensor& dout, const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k, const FlashMask& mask,
    std::optional<double> scale, int64_t tile) {
  const auto cq = host_offsets(cu_seqlens_q), ck = host_offsets(cu_seqlens_k);
  auto dq = at::zeros(q.sizes(), q.options()), dk = at::zeros(k.sizes(), k.options()),
       dv = at::zeros(v.sizes(), v.options());
  for (size_t b = 0; b + 1 < cq.size(); ++b) {
    if (cq[b + 1] == cq[b] || ck[b + 1] == ck[b]) continue;  // no query or no key: no gradient
    auto [dqb, dkb, dvb] =
        flash_reference_backward(sequence(q, cq, b), sequence(k, ck, b), sequence(v, ck, b), sequence(o, cq, b),
                                 L.narrow(1, cq[b], cq[b + 1] - cq[b]), sequence(dout, cq, b), mask, scale, tile);
    sequence(dq, cq, b).copy_(dqb);
    sequence(dk, ck, b).copy_(dkb);
    sequence(dv, ck, b).copy_(dvb);
  }
  return {dq, dk, dv};
}

}  // namespace lmscale::ops
