// Where one (batch, query head) of a FlashAttention call lives and what its mask lets it see (flash_params.h,
// docs/spec.md §3.6): the sequence's lengths, the first rows of its tensors (packed variable-length batches), its
// K/V head (grouped-query attention) and the mask's tile arithmetic. Shared by the mma.sync, Hopper and fp32
// kernels, so every family skips the same tiles and masks the same entries as ops/flash_reference.h.
#pragma once
#include <climits>
#include <cstdint>

#include "kernels/flash_params.h"

namespace lmscale::kernels {

// Whether any mask bound applies: the kernels' Masked template switch (without one, only key tails are masked).
__host__ __device__ __forceinline__ bool flash_masked(const FlashParams& p) {
  return p.is_causal || p.window_left >= 0 || p.window_right >= 0;
}
__host__ __device__ __forceinline__ int flash_heads_k(const FlashParams& p) { return p.heads_k > 0 ? p.heads_k : p.heads; }
// Query heads per K/V head.
__host__ __device__ __forceinline__ int flash_group(const FlashParams& p) { return p.heads / flash_heads_k(p); }
__host__ __device__ __forceinline__ bool flash_varlen(const FlashParams& p) { return p.cu_seqlens_q != nullptr; }

// The rows and heads of q (or o, dout, dq) and of k (or v, dk, dv) as their TMA maps see them: (rows, heads, batch);
// packed batches are one batch of total rows.
struct FlashRowsView {
  int rows, heads, batch;
};
__host__ __device__ __forceinline__ FlashRowsView flash_q_view(const FlashParams& p) {
  return flash_varlen(p) ? FlashRowsView{p.total_q, p.heads, 1} : FlashRowsView{p.seqlen_q, p.heads, p.batch};
}
// The batch coordinate of sequence b in a TMA map over flash_q_view / flash_k_view: a packed batch is one batch.
__host__ __device__ __forceinline__ int flash_map_batch(const FlashParams& p, int b) { return flash_varlen(p) ? 0 : b; }
__host__ __device__ __forceinline__ FlashRowsView flash_k_view(const FlashParams& p) {
  return flash_varlen(p) ? FlashRowsView{p.total_k, flash_heads_k(p), 1}
                         : FlashRowsView{p.seqlen_k, flash_heads_k(p), p.batch};
}

// The rows of lse, dsum and dq_accum (one "plane" per (batch, head) dense, per head packed) and how many planes.
__host__ __device__ __forceinline__ int64_t flash_stat_rows(const FlashParams& p) {
  return flash_varlen(p) ? p.total_q : p.seqlen_q;
}
__host__ __device__ __forceinline__ int64_t flash_stat_planes(const FlashParams& p) {
  return flash_varlen(p) ? p.heads : static_cast<int64_t>(p.batch) * p.heads;
}

// The rows and planes of dkv_accum: K/V rows per plane, one plane per (batch, K/V head) dense, per K/V head packed.
__host__ __device__ __forceinline__ int64_t flash_kv_rows(const FlashParams& p) {
  return flash_varlen(p) ? p.total_k : p.seqlen_k;
}
__host__ __device__ __forceinline__ int64_t flash_kv_planes(const FlashParams& p) {
  return flash_varlen(p) ? flash_heads_k(p) : static_cast<int64_t>(p.batch) * flash_heads_k(p);
}

// Sequence b of a call (every head of it shares lengths and mask).
struct FlashSeq {
  int len_q, len_k;
  int64_t q_row0, k_row0;  // the sequence's first row in q/o/dout/dq and in k/v/dk/dv (packed batches; else 0)
  int64_t stat_base, stat_head_stride;  // row of (b, h) in lse/dsum/dq_accum: stat_base + h * stat_head_stride
  int plane_base;                       // plane of (b, h) in dq_accum's (row, plane) view: plane_base + h
  int64_t kv_base, kv_head_stride;      // row of (b, K/V head hk) in dkv_accum: kv_base + hk * kv_head_stride
  int shift, left, right;               // the mask; a negative side is unbounded

  __device__ int64_t stat_row0(int h) const { return stat_base + h * stat_head_stride; }
  __device__ int64_t kv_row0(int hk) const { return kv_base + hk * kv_head_stride; }

  // Keys [key_begin(i0), key_end(i1)) hold every key some query of rows [i0, i1) sees (empty when begin >= end).
  __device__ int key_begin(int i0) const { return left >= 0 ? max(0, i0 + shift - left) : 0; }
  __device__ int key_end(int i1) const { return right >= 0 ? min(len_k, i1 + shift + right) : len_k; }
  // Queries [query_begin(j0), query_end(j1)) hold every query that sees some key of [j0, j1).
  __device__ int query_begin(int j0) const { return right >= 0 ? max(0, j0 - shift - right) : 0; }
  __device__ int query_end(int j1) const { return left >= 0 ? min(len_q, j1 - shift + left) : len_q; }
  // Whether query i sees key j by the mask's bounds (tails, i >= len_q or j >= len_k, are the caller's).
  __device__ bool sees(int i, int j) const {
    return (left < 0 || j >= i + shift - left) && (right < 0 || j <= i + shift + right);
  }
  // What a thread that keeps its rows (or keys) for the whole block compares each masked entry with: two compares
  // instead of sees() and the tail's. Masked: the kernel's template switch (without it only the key tail bounds).
  // The keys query i sees, [first_key(i), last_key(i)], the key tail included.
  template <bool Masked>
  __device__ int first_key(int i) const { return Masked && left >= 0 ? i + shift - left : INT_MIN; }
  template <bool Masked>
  __device__ int last_key(int i) const { return Masked && right >= 0 ? min(len_k - 1, i + shift + right) : len_k - 1; }
  // The queries that see key j, [first_query(j), last_query(j)]; none for a key past the end.
  template <bool Masked>
  __device__ int first_query(int j) const {
    return j >= len_k ? INT_MAX : Masked && right >= 0 ? j - shift - right : INT_MIN;
  }
  template <bool Masked>
  __device__ int last_query(int j) const { return Masked && left >= 0 ? j - shift + left : INT_MAX; }

  // The tiles every entry of which the mask shows, so no mask is applied (Note [mask tiles], flash_fwd_kernel.cuh).
  // Forward: a query tile [m0, m0 + rows) sees the key tile [n0, n0 + cols) whole iff lo <= n0 <= hi.
  template <bool Masked>
  __device__ int2 whole_key_tiles(int m0, int rows, int cols) const {
    const int lo = Masked && left >= 0 ? m0 + rows - 1 + shift - left : INT_MIN;
    const int hi = (Masked && right >= 0 ? min(len_k, m0 + shift + right + 1) : len_k) - cols;
    return make_int2(lo, hi);
  }
  // Backward: the key tile [n0, n0 + keys) is seen whole by the query tile [m0, m0 + rows) iff lo <= m0 <= hi
  // (never at the key tail).
  template <bool Masked>
  __device__ int2 whole_query_tiles(int n0, int keys, int rows) const {
    const int lo = n0 + keys > len_k ? INT_MAX : Masked && right >= 0 ? n0 + keys - 1 - shift - right : INT_MIN;
    const int hi = Masked && left >= 0 ? n0 - (rows - 1) - shift + left : INT_MAX;
    return make_int2(lo, hi);
  }
};

// Note [packed tile slots]. A grid over the tiles a packed batch really has, found on the device: sequence b's tiles
// of `rows` rows take the slots [cu[b] / rows + b, cu[b] / rows + b + ceil(len_b / rows)) of
// [0, flash_packed_slots(total, batch, rows)). The ranges are disjoint and start in increasing order (b's tiles
// end at most one slot past (cu[b] + len_b) / rows + b, where b + 1's begin), so a slot finds its sequence by a
// binary search over the offsets, and at most batch + 1 slots hold no tile. A grid sized by the longest sequence
// instead gives every sequence as many tiles as the longest: 59 % of them empty for 16 documents in 16k tokens.
__host__ __device__ __forceinline__ int flash_packed_slots(int total, int batch, int rows) {
  return total / rows + batch + 1;
}
// Tiles of `rows` rows per plane (a head, or a K/V head) over the q (or k) rows of a call: a packed batch's slots,
// else every sequence's ceil(seqlen / rows).
__host__ __device__ __forceinline__ int64_t flash_row_tiles(const FlashParams& p, int total, int seqlen, int rows) {
  return flash_varlen(p) ? flash_packed_slots(total, p.batch, rows)
                         : static_cast<int64_t>(p.batch) * ((seqlen + rows - 1) / rows);
}
// The sequence b of slot j and the tile's index in it (0 for its first rows); false for a slot holding no tile.
__device__ __forceinline__ bool flash_packed_tile(const int* cu_seqlens, int batch, int rows, int j, int& b, int& tile) {
  int lo = 0, hi = batch - 1;  // the last sequence whose first slot is <= j
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (cu_seqlens[mid] / rows + mid <= j) lo = mid;
    else hi = mid - 1;
  }
  const int begin = cu_seqlens[lo], len = cu_seqlens[lo + 1] - begin;
  b = lo;
  tile = j - (begin / rows + lo);
  return tile >= 0 && tile * rows < len;
}

__device__ __forceinline__ FlashSeq flash_seq(const FlashParams& p, int b) {
  FlashSeq s;
  if (flash_varlen(p)) {
    const int q0 = p.cu_seqlens_q[b], k0 = p.cu_seqlens_k[b];
    s.len_q = p.cu_seqlens_q[b + 1] - q0;
    s.len_k = p.cu_seqlens_k[b + 1] - k0;
    s.q_row0 = q0, s.k_row0 = k0;
    s.stat_base = q0, s.stat_head_stride = p.total_q;
    s.plane_base = 0;
    s.kv_base = k0, s.kv_head_stride = p.total_k;
  } else {
    s.len_q = p.seqlen_q, s.len_k = p.seqlen_k;
    s.q_row0 = s.k_row0 = 0;
    s.stat_base = static_cast<int64_t>(b) * p.heads * p.seqlen_q, s.stat_head_stride = p.seqlen_q;
    s.plane_base = b * p.heads;
    s.kv_base = static_cast<int64_t>(b) * flash_heads_k(p) * p.seqlen_k, s.kv_head_stride = p.seqlen_k;
  }
  s.shift = p.bottom_right ? s.len_k - s.len_q : 0;
  s.left = p.window_left;
  s.right = p.is_causal ? 0 : p.window_right;
  return s;
}

}  // namespace lmscale::kernels
