// The tiled FlashAttention-2 reference in plain ATen (docs/spec.md §3): the CPU path of the lmscale ops and
// the numerical reference the CUDA kernels are tested against, for every mask (FlashMask, §3.6) and layout
// (grouped-query heads, packed variable-length batches). Runs on any device; fp16/bf16/fp32 compute in fp32,
// fp64 stays fp64. Inputs are assumed valid (flash_attention.cpp checks them).
#pragma once
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <tuple>

namespace lmscale::ops {

// Query and key tile size of the reference; small enough that CPU tests with odd lengths cross tiles.
constexpr int64_t kReferenceTile = 64;

// Which keys each query sees (docs/spec.md §3.6, FlashAttention's definition). With Nq queries and Nk keys,
// query i sees key j iff
//     i + shift - window_left  <=  j  <=  i + shift + window_right,   shift = bottom_right ? Nk - Nq : 0,
// where a negative window side is unbounded. causal makes window_right 0 (as FlashAttention's causal=True
// does); the default mask sees every key. shift 0 is SDPA's is_causal alignment (query i's diagonal is key i,
// the top-left corner); Nk - Nq is FlashAttention's (the last query's is the last key, the bottom-right
// corner: torch.nn.attention.bias.causal_lower_right), the two agreeing when Nq == Nk. A query that sees no
// key gets O = 0 and L = +inf, and passes no gradient (FlashAttention's rule).
struct FlashMask {
  bool causal = false;
  bool bottom_right = false;
  int64_t window_left = -1;
  int64_t window_right = -1;

  // The bounds after causal, as offsets from the diagonal; nullopt: unbounded.
  std::optional<int64_t> left() const { return window_left >= 0 ? std::optional<int64_t>(window_left) : std::nullopt; }
  std::optional<int64_t> right() const {
    if (causal) return 0;
    return window_right >= 0 ? std::optional<int64_t>(window_right) : std::nullopt;
  }
  int64_t shift(int64_t nq, int64_t nk) const { return bottom_right ? nk - nq : 0; }
  bool sees(int64_t i, int64_t j, int64_t nq, int64_t nk) const {
    const int64_t diag = i + shift(nq, nk);
    return (!left() || j >= diag - *left()) && (!right() || j <= diag + *right());
  }
};

// A half-open index range [begin, end); empty when begin >= end.
struct IndexRange {
  int64_t begin, end;
  bool empty() const { return begin >= end; }
};

// The tile arithmetic of the mask, the same for the reference and the kernels: the keys that some query of
// rows [i0, i1) sees, and the queries that see some key of [j0, j1). A tile outside them is skipped; a tile
// inside mask_free needs no masking.
inline IndexRange visible_keys(const FlashMask& m, int64_t nq, int64_t nk, int64_t i0, int64_t i1) {
  const int64_t s = m.shift(nq, nk);
  const int64_t begin = m.left() ? std::max<int64_t>(0, i0 + s - *m.left()) : 0;
  const int64_t end = m.right() ? std::min<int64_t>(nk, i1 - 1 + s + *m.right() + 1) : nk;
  return {begin, std::max(begin, end)};
}
inline IndexRange visible_queries(const FlashMask& m, int64_t nq, int64_t nk, int64_t j0, int64_t j1) {
  const int64_t s = m.shift(nq, nk);
  const int64_t begin = m.right() ? std::max<int64_t>(0, j0 - s - *m.right()) : 0;
  const int64_t end = m.left() ? std::min<int64_t>(nq, j1 - 1 - s + *m.left() + 1) : nq;
  return {begin, std::max(begin, end)};
}
// Whether every query of [i0, i1) sees every key of [j0, j1).
inline bool mask_free(const FlashMask& m, int64_t nq, int64_t nk, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const int64_t s = m.shift(nq, nk);
  return (!m.left() || j0 >= i1 - 1 + s - *m.left()) && (!m.right() || j1 - 1 <= i0 + s + *m.right());
}

// q (..., Hq, Nq, D), k and v (..., Hkv, Nk, D) with Hq a multiple of Hkv (query head h reads K/V head
// h / (Hq / Hkv), consecutive groups as FlashAttention and SDPA's enable_gqa; 2-D inputs have no head dim)
// -> (O like q, L (..., Hq, Nq) fp32, or fp64 for fp64 inputs). scale: the scores' factor, default
// 1/sqrt(D). P is rounded to v's dtype before P V, as the kernels do.
std::tuple<at::Tensor, at::Tensor> flash_reference_forward(const at::Tensor& q, const at::Tensor& k,
                                                           const at::Tensor& v, const FlashMask& mask,
                                                           std::optional<double> scale = std::nullopt,
                                                           int64_t tile = kReferenceTile);

// Backward by recomputation from L: D = rowsum(dO ⊙ O), P = exp(S - L), dV = P^T dO, dP = dO V^T,
// dS = P ⊙ (dP - D), dQ = dS K * scale, dK = dS^T Q * scale; dK and dV summed over each K/V head's group of
// query heads. Returns (dQ, dK, dV) in the input dtype.
std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_reference_backward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o, const at::Tensor& L,
    const at::Tensor& dout, const FlashMask& mask, std::optional<double> scale = std::nullopt,
    int64_t tile = kReferenceTile);

// Square causal (top-left) or no mask, the default scale: the kernels' original contract.
std::tuple<at::Tensor, at::Tensor> flash_reference_forward(const at::Tensor& q, const at::Tensor& k,
                                                           const at::Tensor& v, bool is_causal,
                                                           int64_t tile = kReferenceTile);
std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_reference_backward(const at::Tensor& q, const at::Tensor& k,
                                                                        const at::Tensor& v, const at::Tensor& o,
                                                                        const at::Tensor& L, const at::Tensor& dout,
                                                                        bool is_causal,
                                                                        int64_t tile = kReferenceTile);

// Packed variable-length batches (FlashAttention's varlen layout): q (total_q, Hq, D), k and v (total_k, Hkv,
// D); sequence b holds rows [cu_seqlens_q[b], cu_seqlens_q[b+1]) of q and [cu_seqlens_k[b], cu_seqlens_k[b+1])
// of k and v, and attends only within itself, the mask applied with its own lengths (bottom_right aligns each
// sequence's own corner). cu_seqlens: int32 (B + 1,), from 0, non-decreasing; rows past the last sequence
// are in none (O = 0, L = +inf). Returns (O (total_q, Hq, D) like q, L (Hq, total_q)).
std::tuple<at::Tensor, at::Tensor> flash_reference_varlen_forward(const at::Tensor& q, const at::Tensor& k,
                                                                  const at::Tensor& v, const at::Tensor& cu_seqlens_q,
                                                                  const at::Tensor& cu_seqlens_k,
                                                                  const FlashMask& mask,
                                                                  std::optional<double> scale = std::nullopt,
                                                                  int64_t tile = kReferenceTile);

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_reference_varlen_backward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o, const at::Tensor& L,
    const at::Tensor& dout, const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k, const FlashMask& mask,
    std::optional<double> scale = std::nullopt, int64_t tile = kReferenceTile);

}  // namespace lmscale::ops
