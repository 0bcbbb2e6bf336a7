// The block plan of Note [square kernel blocks] and its executors; see flash_blocks.h.
#include "ops/flash_blocks.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>

namespace lmscale::ops {

std::optional<std::vector<FlashBlock>> square_kernel_blocks(const FlashMask& mask, int64_t nq, int64_t nk) {
  const int64_t s = mask.shift(nq, nk);
  // A left bound hides keys [0, i + s - left) of row i, keys the right bound (>= 0) would show: some key as
  // soon as the last row's bound is past key 0.
  if (mask.left() && nq - 1 + s - *mask.left() > 0) return std::nullopt;
  std::vector<FlashBlock> blocks;
  // Row i sees keys j <= i + d; no bound, or one that row 0 already passes the last key with, hides nothing.
  if (!mask.right() || s + *mask.right() >= nk - 1) {
    blocks.push_back({0, nq, 0, nk, false});
    return blocks;
  }
  const int64_t d = s + *mask.right();
  const int64_t a = std::clamp<int64_t>(-d, 0, nq), b = std::clamp<int64_t>(nk - d, a, nq);
  if (b - a == 1) {
    blocks.push_back({a, 1, 0, a + d + 1, false});  // a 1 x 1 causal square is one more key in full
  } else if (b > a) {
    if (a + d > 0) blocks.push_back({a, b - a, 0, a + d, false});
    blocks.push_back({a, b - a, a + d, b - a, true});
  }
  if (nq > b) blocks.push_back({b, nq - b, 0, nk, false});
  return blocks;
}

namespace {

constexpr double kLog2e = 1.4426950408889634074;
constexpr double kLn2 = 0.6931471805599453094;

int64_t group_size(const at::Tensor& q, const at::Tensor& k) { return q.dim() >= 3 ? q.size(-3) / k.size(-3) : 1; }

// K or V with each head repeated for its group of query heads (the layout the kernels read).
at::Tensor repeat_heads(const at::Tensor& t, int64_t group) { return group > 1 ? t.repeat_interleave(group, -3) : t; }

// A per-query-head dK or dV (..., Hq, Nk, D) summed over each group to (..., Hkv, Nk, D).
at::Tensor sum_heads(const at::Tensor& t, int64_t group) {
  return group > 1 ? t.unflatten(-3, {t.size(-3) / group, group}).sum(-3) : t;
}

// The dtype of L and of the merge: fp32, fp64 for fp64 inputs (as the ops).
at::ScalarType lse_dtype(const at::Tensor& q) { return q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

bool covers(const FlashBlock& b, int64_t nq, int64_t nk) { return b.q0 == 0 && b.nq == nq && b.k0 == 0 && b.nk == nk; }

}  // namespace

std::tuple<at::Tensor, at::Tensor> forward_by_blocks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                     const std::vector<FlashBlock>& blocks, double scale,
                                                     const SquareForward& run) {
  const int64_t nq = q.size(-2), nk = k.size(-2), group = group_size(q, k);
  const auto kr = repeat_heads(k, group), vr = repeat_heads(v, group);
  if (blocks.size() == 1 && covers(blocks[0], nq, nk)) return run(q, kr, vr, blocks[0].causal, scale);

  // Rows no block covers see no key: O = 0, L = +inf.
  const auto acc = lse_dtype(q);
  auto O = at::zeros(q.sizes(), q.options());
  auto L = at::full(q.sizes().slice(0, q.dim() - 1), std::numeric_limits<double>::infinity(), q.options().dtype(acc));
  for (size_t first = 0; first < blocks.size();) {
    size_t last = first;  // blocks [first, last) share their rows
    while (last < blocks.size() && blocks[last].q0 == blocks[first].q0) ++last;
    const int64_t q0 = blocks[first].q0, rows = blocks[first].nq;
    const auto qb = q.narrow(-2, q0, rows);
    std::vector<at::Tensor> os, ls;
    for (size_t i = first; i < last; ++i) {
      const auto& b = blocks[i];
      auto [ob, lb] = run(qb, kr.narrow(-2, b.k0, b.nk), vr.narrow(-2, b.k0, b.nk), b.causal, scale);
      os.push_back(ob);
      ls.push_back(lb.to(acc));
    }
    if (os.size() == 1) {
      O.narrow(-2, q0, rows).copy_(os[0]);
      L.narrow(-1, q0, rows).copy_(ls[0]);
    } else {
      // Every row of a block sees at least one of its keys, so each L_b is finite. exp2, not exp: see the
      // note on MKL in flash_reference.cpp (the tests run this on CPU in fp64).
      auto lmax = at::stack(ls).amax(0);
      auto sum = at::zeros_like(lmax);
      for (const auto& lb : ls) sum = sum + at::exp2((lb - lmax) * kLog2e);
      auto lse = lmax + at::log2(sum) * kLn2;
      auto o = at::zeros(os[0].sizes(), os[0].options().dtype(acc));
      for (size_t i = 0; i < os.size(); ++i) o = o + at::exp2((ls[i] - lse) * kLog2e).unsqueeze(-1) * os[i].to(acc);
      O.narrow(-2, q0, rows).copy_(o);
      L.narrow(-1, q0, rows).copy_(lse);
    }
    first = last;
  }
  if (acc != at::kDouble) L = L.to(at::kFloat);
  return {O, L};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_by_blocks(const at::Tensor& q, const at::Tensor& k,
                                                                  const at::Tensor& v, const at::Tensor& o,
                                                                  const at::Tensor& L, const at::Tensor& dout,
                                                                  const std::vector<FlashBlock>& blocks, double scale,
                                                                  const SquareBackward& run) {
  const int64_t nq = q.size(-2), nk = k.size(-2), group = group_size(q, k);
  const auto kr = repeat_heads(k, group), vr = repeat_heads(v, group);
  if (blocks.size() == 1 && covers(blocks[0], nq, nk)) {
    auto [dq, dk, dv] = run(q, kr, vr, o, L, dout, blocks[0].causal, scale);
    return {dq, sum_heads(dk, group), sum_heads(dv, group)};
  }
  // Each block with the whole rows' O and L (Note [square kernel blocks]); the sums in fp32 (fp64 for fp64).
  const auto acc = lse_dtype(q);
  auto dq = at::zeros(q.sizes(), q.options().dtype(acc));
  auto dk = at::zeros(kr.sizes(), kr.options().dtype(acc)), dv = at::zeros(vr.sizes(), vr.options().dtype(acc));
  for (const auto& b : blocks) {
    auto [dqb, dkb, dvb] = run(q.narrow(-2, b.q0, b.nq), kr.narrow(-2, b.k0, b.nk), vr.narrow(-2, b.k0, b.nk),
                               o.narrow(-2, b.q0, b.nq), L.narrow(-1, b.q0, b.nq), dout.narrow(-2, b.q0, b.nq),
                               b.causal, scale);
    dq.narrow(-2, b.q0, b.nq).add_(dqb);
    dk.narrow(-2, b.k0, b.nk).add_(dkb);
    dv.narrow(-2, b.k0, b.nk).add_(dvb);
  }
  return {dq.to(q.scalar_type()), sum_heads(dk, group).to(k.scalar_type()), sum_heads(dv, group).to(v.scalar_type())};
}

}  // namespace lmscale::ops
