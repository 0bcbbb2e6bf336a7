// FlashAttention-2 backward in fp32 (FlashDtype::kFP32), by recomputation from Q, K, V, O and L
// (docs/spec.md §3), fp32 FFMA throughout. Three kernels, in stream order:
//   1. dsum:  D_i = rowsum(dO ⊙ O), one warp per query row;
//   2. dK/dV: one block per 64 keys, streaming 32-query tiles: recompute Pᵀ and dPᵀ, then
//             dV += Pᵀ dO and dK += scale · dSᵀ Q, with dS = P ⊙ (dP − D);
//   3. dQ:    one block per 64 queries, streaming 32-key tiles: dQ = scale · dS K.
// Splitting dQ from dK/dV recomputes P and dP once more (7 tile matmuls instead of 5) but needs no
// atomics and no dq_accum workspace, and the result is deterministic: correctness before speed.
// Thread layout: Note [fp32 tile mapping] in flash_fp32_tile.cuh.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/flash_fp32.h"
#include "kernels/flash_fp32_tile.cuh"
#include "kernels/flash_head_dims.h"

namespace lmscale::kernels {
namespace flash_fp32 {

constexpr int kDsumRowsPerBlock = kThreads / 32;  // one warp per row

template <int D>
__global__ void __launch_bounds__(kThreads) flash_fp32_dsum_kernel(const FlashParams p) {
  const Head head(p, blockIdx.x / p.heads, blockIdx.x % p.heads);
  const int row = blockIdx.y * kDsumRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= head.seq.len_q) return;  // a whole warp leaves together: the shuffles below stay full
  const float* o = head.o + static_cast<int64_t>(row) * p.o_row_stride;
  const float* dout = head.dout + static_cast<int64_t>(row) * p.do_row_stride;
  float sum = 0.f;
  for (int d = lane; d < D; d += 32) sum = fmaf(o[d], dout[d], sum);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) head.dsum[row] = sum;
}

template <int D>
constexpr int dkdv_smem_bytes() {
  return ((2 * kOuter + 2 * kInner) * padded(D) + 2 * kOuter * kScoreStride + 2 * kInner) *
         static_cast<int>(sizeof(float));
}

template <int D, bool Masked>
__global__ void __launch_bounds__(kThreads) flash_fp32_dkdv_kernel(const FlashParams p) {
  extern __shared__ float smem[];
  float* Ks = smem;                       // kOuter keys x (D + 1)
  float* Vs = Ks + kOuter * padded(D);    // kOuter x (D + 1)
  float* Qs = Vs + kOuter * padded(D);    // kInner queries x (D + 1)
  float* dOs = Qs + kInner * padded(D);   // kInner x (D + 1)
  float* Pt = dOs + kInner * padded(D);   // kOuter x kScoreStride: Pᵀ (key, query)
  float* dSt = Pt + kOuter * kScoreStride;  // kOuter x kScoreStride: dSᵀ
  float* Ls = dSt + kOuter * kScoreStride;  // kInner: L of this tile's queries
  float* Ds = Ls + kInner;                  // kInner: D_i of this tile's queries

  // One block per (K/V head, 64 keys), walking the query tiles of every query head of the group (Note [grouped
  // heads], flash_bwd_kernel.cuh): dK and dV sum over the group in registers.
  const int heads_k = flash_heads_k(p), group = flash_group(p);
  const int b = blockIdx.x / heads_k, hk = blockIdx.x % heads_k;
  const Head first(p, b, hk * group);
  const FlashSeq& seq = first.seq;
  const int n0 = blockIdx.y * kOuter;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  if (n0 >= seq.len_k) return;  // a packed batch's shorter sequence

  load_rows<D>(Ks, first.k, p.k_row_stride, n0, kOuter, seq.len_k);
  load_rows<D>(Vs, first.v, p.v_row_stride, n0, kOuter, seq.len_k);

  float dk[kRowsPerThread][D / 16] = {}, dv[kRowsPerThread][D / 16] = {};
  // Only the query tiles that hold a query seeing one of this block's keys (Note [mask tiles]).
  const int i_begin = Masked ? seq.query_begin(n0) / kInner * kInner : 0;
  const int i_end = Masked ? seq.query_end(min(n0 + kOuter, seq.len_k)) : seq.len_q;
  for (int g = 0; g < group; ++g)
  for (int i0 = i_begin; i0 < i_end; i0 += kInner) {
    const Head head(p, b, hk * group + g);
    load_rows<D>(Qs, head.q, p.q_row_stride, i0, kInner, seq.len_q);
    load_rows<D>(dOs, head.dout, p.do_row_stride, i0, kInner, seq.len_q);
    for (int i = threadIdx.x; i < kInner; i += kThreads) {
      const bool in = i0 + i < seq.len_q;
      Ls[i] = in ? head.lse[i0 + i] : 0.f;
      Ds[i] = in ? head.dsum[i0 + i] : 0.f;
    }
    __syncthreads();  // K, V (first pass), Q, dO, L, D in shared memory

    float pt[kRowsPerThread][kScoreCols] = {}, dst[kRowsPerThread][kScoreCols] = {};
    score_tile<D>(pt, Ks, Qs);    // Sᵀ = K Qᵀ (unscaled)
    score_tile<D>(dst, Vs, dOs);  // dPᵀ = V dOᵀ
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      const int key = n0 + ty * kRowsPerThread + r;
#pragma unroll
      for (int c = 0; c < kScoreCols; ++c) {
        const int qi = tx + 16 * c, query = i0 + qi;
        const bool visible = key < seq.len_k && query < seq.len_q && (!Masked || seq.sees(query, key));
        const float prob = visible ? expf(pt[r][c] * p.scale - Ls[qi]) : 0.f;
        pt[r][c] = prob;
        dst[r][c] = prob * (dst[r][c] - Ds[qi]);
      }
    }
    store_scores(Pt, pt);
    store_scores(dSt, dst);
    __syncthreads();  // Pᵀ, dSᵀ complete
    output_tile<D>(dv, Pt, dOs);  // dV += Pᵀ dO
    output_tile<D>(dk, dSt, Qs);  // dK += dSᵀ Q (scaled at the end)
    __syncthreads();  // Q, dO, Pᵀ, dSᵀ, L, D read before the next tile overwrites them
  }
  // Keys no query sees get zero gradients, written like the rest.
  store_output<D>(first.dk, p.dk_row_stride, n0, seq.len_k, dk, p.scale);
  store_output<D>(first.dv, p.dv_row_stride, n0, seq.len_k, dv, 1.f);
}

template <int D>
constexpr int dq_smem_bytes() {
  return ((2 * kOuter + 2 * kInner) * padded(D) + kOuter * kScoreStride) * static_cast<int>(sizeof(float));
}

template <int D, bool Masked>
__global__ void __launch_bounds__(kThreads) flash_fp32_dq_kernel(const FlashParams p) {
  extern __shared__ float smem[];
  float* Qs = smem;                      // kOuter queries x (D + 1)
  float* dOs = Qs + kOuter * padded(D);  // kOuter x (D + 1)
  float* Ks = dOs + kOuter * padded(D);  // kInner keys x (D + 1)
  float* Vs = Ks + kInner * padded(D);   // kInner x (D + 1)
  float* dSs = Vs + kInner * padded(D);  // kOuter x kScoreStride

  const Head head(p, blockIdx.x / p.heads, blockIdx.x % p.heads);
  const FlashSeq& seq = head.seq;
  const int m0 = blockIdx.y * kOuter;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  if (m0 >= seq.len_q) return;  // a packed batch's shorter sequence

  load_rows<D>(Qs, head.q, p.q_row_stride, m0, kOuter, seq.len_q);
  load_rows<D>(dOs, head.dout, p.do_row_stride, m0, kOuter, seq.len_q);
  float lse[kRowsPerThread], dsum[kRowsPerThread];  // of the owned rows
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int row = m0 + ty * kRowsPerThread + r;
    lse[r] = row < seq.len_q ? head.lse[row] : 0.f;
    dsum[r] = row < seq.len_q ? head.dsum[row] : 0.f;
  }

  float dq[kRowsPerThread][D / 16] = {};
  const int k_begin = Masked ? seq.key_begin(m0) / kInner * kInner : 0;
  const int k_end = Masked ? seq.key_end(min(m0 + kOuter, seq.len_q)) : seq.len_k;
  for (int n0 = k_begin; n0 < k_end; n0 += kInner) {
    load_rows<D>(Ks, head.k, p.k_row_stride, n0, kInner, seq.len_k);
    load_rows<D>(Vs, head.v, p.v_row_stride, n0, kInner, seq.len_k);
    __syncthreads();  // Q, dO (first pass), K, V in shared memory

    float s[kRowsPerThread][kScoreCols] = {}, dp[kRowsPerThread][kScoreCols] = {};
    score_tile<D>(s, Qs, Ks);    // S = Q Kᵀ (unscaled)
    score_tile<D>(dp, dOs, Vs);  // dP = dO Vᵀ
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      const int row = m0 + ty * kRowsPerThread + r;
#pragma unroll
      for (int c = 0; c < kScoreCols; ++c) {
        const int col = n0 + tx + 16 * c;
        const bool visible = row < seq.len_q && col < seq.len_k && (!Masked || seq.sees(row, col));
        const float prob = visible ? expf(s[r][c] * p.scale - lse[r]) : 0.f;
        s[r][c] = prob * (dp[r][c] - dsum[r]);  // dS
      }
    }
    store_scores(dSs, s);
    __syncthreads();  // dS complete
    output_tile<D>(dq, dSs, Ks);  // dQ += dS K (scaled at the end)
    __syncthreads();  // K, V, dS read before the next tile overwrites them
  }
  store_output<D>(head.dq, p.dq_row_stride, m0, seq.len_q, dq, p.scale);
}

template <int D, bool Masked>
void launch_bwd(const FlashParams& p, cudaStream_t stream) {
  const int heads = p.batch * p.heads, kv_heads = p.batch * flash_heads_k(p);
  const int dsum_blocks = (p.seqlen_q + kDsumRowsPerBlock - 1) / kDsumRowsPerBlock;
  launch(flash_fp32_dsum_kernel<D>, p, heads, dsum_blocks, 0, stream, "flash_fp32_dsum_kernel");
  const int n_blocks = (p.seqlen_k + kOuter - 1) / kOuter;
  launch(flash_fp32_dkdv_kernel<D, Masked>, p, kv_heads, n_blocks, dkdv_smem_bytes<D>(), stream,
         "flash_fp32_dkdv_kernel");
  const int m_blocks = (p.seqlen_q + kOuter - 1) / kOuter;
  launch(flash_fp32_dq_kernel<D, Masked>, p, heads, m_blocks, dq_smem_bytes<D>(), stream, "flash_fp32_dq_kernel");
}

}  // namespace flash_fp32

void run_flash_fp32_bwd(const FlashParams& p, void* stream) {
  with_head_dim_or_throw(FlashHeadDims{}, p.head_dim, "run_flash_fp32_bwd", "fp32", [&](auto d) {
    constexpr int D = decltype(d)::value;
    if (flash_masked(p))
      flash_fp32::launch_bwd<D, true>(p, static_cast<cudaStream_t>(stream));
    else
      flash_fp32::launch_bwd<D, false>(p, static_cast<cudaStream_t>(stream));
  });
}

}  // namespace lmscale::kernels
