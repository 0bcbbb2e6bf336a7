// FlashAttention-2 forward device code (docs/spec.md §3.1): one block per (128-query tile, batch*head); each
// warp owns kMT x 16 query rows and keeps O, the running max m and the running sum l in registers while
// it streams 64-key tiles of K and V through shared memory (kMT > 1 reuses each K/V fragment kMT times). Writes O (input dtype) and L = m + log l
// (fp32). Grid, shared memory and traits are chosen in flash_fwd_launch.cuh.
#pragma once
#include <climits>
#include <cmath>

#include "kernels/flash_common.cuh"
#include "kernels/flash_params.h"
#include "kernels/flash_sequence.cuh"

namespace lmscale::kernels::flash {

// Note [mask tiles]. A query tile [m0, m0 + kBlockM) visits only the key tiles that hold a key one of its rows
// sees (FlashSeq::key_begin / key_end: the causal diagonal, a sliding window's left edge, either alignment), so
// tiles wholly outside the mask are never loaded; only tiles that cross a bound of the mask (or the key tail) pay
// for masking. A row may see no key of a visited tile, or none at all: the -inf guard of the softmax keeps its
// running max finite-safe, and a row that saw no key ends with O = 0 and L = +inf.

template <typename T, int D, int kBlockM, int kBlockN, int kWarps, bool Masked>
__global__ void __launch_bounds__(kWarps * 32) flash_fwd_kernel(const FlashParams p) {
  static_assert(kBlockM % (16 * kWarps) == 0, "each warp owns whole 16-row MMA tiles");
  constexpr int kMT = kBlockM / (16 * kWarps);  // m16 tiles per warp
  static_assert(D % 16 == 0 && kBlockN % 16 == 0, "MMA k-chunks are 16 wide");
  constexpr int kThreads = kWarps * 32;
  constexpr int kLd = D + 8;  // padded shared row, see flash_tiles.h
  using E = Elem<T>;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + kBlockM * kLd;
  T* sV = sK + kBlockN * kLd;

  // Note [grid order]. Blocks start in linear order, x fastest. With (batch*head) on x and the query
  // tile on y counted down, every head's heaviest causal tiles (largest m) start before any lighter
  // tile, so the grid ends on short blocks; with the tile on x, the last head's heavy tiles started near
  // the end and ran alone (measured: docs/flash_notes.md, v3).
  const int m_block = gridDim.y - 1 - blockIdx.y;
  const int bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads, hk = h / flash_group(p);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int m0 = m_block * kBlockM;
  const FlashSeq seq = flash_seq(p, b);
  if (m0 >= seq.len_q) return;  // a packed batch's shorter sequence: the grid is sized by the longest

  const T* gQ = static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride + seq.q_row0 * p.q_row_stride;
  const T* gK = static_cast<const T*>(p.k) + b * p.k_batch_stride + hk * p.k_head_stride + seq.k_row0 * p.k_row_stride;
  const T* gV = static_cast<const T*>(p.v) + b * p.v_batch_stride + hk * p.v_head_stride + seq.k_row0 * p.v_row_stride;
  T* gO = static_cast<T*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride + seq.q_row0 * p.o_row_stride;
  float* gL = p.lse + seq.stat_row0(h);

  // Note [mask tiles]: the key tiles [n_first, n_first + n_tiles) of this query tile.
  const int m_end = min(m0 + kBlockM, seq.len_q);
  const int n_first = Masked ? seq.key_begin(m0) / kBlockN * kBlockN : 0;
  const int n_end = Masked ? seq.key_end(m_end) : seq.len_k;
  const int n_tiles = n_end > n_first ? (n_end - n_first + kBlockN - 1) / kBlockN : 0;

  // Pipeline: K_{j+1} loads while P V_j runs; V_j loads while Q K_j^T runs (one buffer each).
  if (n_tiles > 0) {
    load_rows<kBlockM, D, kLd, kThreads>(sQ, gQ, p.q_row_stride, m0, seq.len_q, tid);
    load_rows<kBlockN, D, kLd, kThreads>(sK, gK, p.k_row_stride, n_first, seq.len_k, tid);
    cp_async_commit();
  }

  uint32_t q_frag[kMT][D / 16][4];
  float acc_o[kMT][D / 8][4];
  float row_max[kMT][2], row_sum[kMT][2];  // row_sum: per-thread partial sums, quad-reduced at the end
#pragma unroll
  for (int mi = 0; mi < kMT; ++mi) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) acc_o[mi][i][0] = acc_o[mi][i][1] = acc_o[mi][i][2] = acc_o[mi][i][3] = 0.f;
    row_max[mi][0] = row_max[mi][1] = -INFINITY;
    row_sum[mi][0] = row_sum[mi][1] = 0.f;
  }
  const float scale_log2 = p.scale * static_cast<float>(M_LOG2E);
  const int warp_row0 = warp * 16 * kMT;
  // This thread's rows: row_a + mi*16 and row_a + mi*16 + 8 (Note [mma fragments]).
  const int row_a = m0 + warp_row0 + lane / 4;
  // Each row's visible keys [key_lo, key_hi] (the key tail included), fixed for the block: two compares per masked
  // entry (Note [mask tiles]); and the key tiles every row sees whole.
  int key_lo[kMT][2], key_hi[kMT][2];
#pragma unroll
  for (int mi = 0; mi < kMT; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row_a + mi * 16 + r * 8;
      key_lo[mi][r] = seq.first_key<Masked>(row);
      key_hi[mi][r] = seq.last_key<Masked>(row);
    }
  const int2 whole = seq.whole_key_tiles<Masked>(m0, kBlockM, kBlockN);

  for (int j = 0; j < n_tiles; ++j) {
    const int n0 = n_first + j * kBlockN;
    load_rows<kBlockN, D, kLd, kThreads>(sV, gV, p.v_row_stride, n0, seq.len_k, tid);
    cp_async_commit();
    cp_async_wait<1>();  // Q (first pass) and K_j have landed; V_j may still be in flight
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int mi = 0; mi < kMT; ++mi)
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
          ldmatrix_x4(q_frag[mi][kk], a_frag(sQ, kLd, warp_row0 + mi * 16, kk * 16, lane));
    }

    // S = Q K_j^T (raw scores; the scale is folded into the exponent below).
    float s[kMT][kBlockN / 8][4];
#pragma unroll
    for (int mi = 0; mi < kMT; ++mi)
#pragma unroll
      for (int i = 0; i < kBlockN / 8; ++i) s[mi][i][0] = s[mi][i][1] = s[mi][i][2] = s[mi][i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int nn = 0; nn < kBlockN / 16; ++nn) {
        uint32_t bk[4];
        ldmatrix_x4(bk, b_frag_pair(sK, kLd, nn * 16, kk * 16, lane));
#pragma unroll
        for (int mi = 0; mi < kMT; ++mi) {
          mma_pair<T>(s[mi][2 * nn], s[mi][2 * nn + 1], q_frag[mi][kk], bk);
        }
      }
    }

    // Note [mask tiles]: mask only the key tail and tiles that cross a bound of the mask.
    const bool need_mask = n0 < whole.x || n0 > whole.y;
    if (need_mask) {
#pragma unroll
      for (int mi = 0; mi < kMT; ++mi)
#pragma unroll
        for (int nt = 0; nt < kBlockN / 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = n0 + nt * 8 + (lane % 4) * 2 + (e % 2);
            if (col < key_lo[mi][e / 2] || col > key_hi[mi][e / 2]) s[mi][nt][e] = -INFINITY;
          }
        }
    }

    // Online softmax in the log2 domain: P = 2^(s*scale*log2e - m*scale*log2e).
#pragma unroll
    for (int mi = 0; mi < kMT; ++mi) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = row_max[mi][r];
#pragma unroll
        for (int nt = 0; nt < kBlockN / 8; ++nt) mx = fmaxf(mx, fmaxf(s[mi][nt][2 * r], s[mi][nt][2 * r + 1]));
        mx = quad_max(mx);
        const float m_scaled = mx == -INFINITY ? 0.f : mx * scale_log2;  // all-masked row: keep exp finite
        const float correction = exp2f(row_max[mi][r] * scale_log2 - m_scaled);
        row_max[mi][r] = mx;
        row_sum[mi][r] *= correction;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
          acc_o[mi][dt][2 * r] *= correction;
          acc_o[mi][dt][2 * r + 1] *= correction;
        }
#pragma unroll
        for (int nt = 0; nt < kBlockN / 8; ++nt) {
          s[mi][nt][2 * r] = exp2f(fmaf(s[mi][nt][2 * r], scale_log2, -m_scaled));
          s[mi][nt][2 * r + 1] = exp2f(fmaf(s[mi][nt][2 * r + 1], scale_log2, -m_scaled));
          row_sum[mi][r] += s[mi][nt][2 * r] + s[mi][nt][2 * r + 1];
        }
      }
    }

    cp_async_wait<0>();  // V_j has landed
    __syncthreads();     // ...and every warp is done reading K_j, so K_{j+1} may overwrite it
    if (j + 1 < n_tiles) {
      load_rows<kBlockN, D, kLd, kThreads>(sK, gK, p.k_row_stride, n0 + kBlockN, seq.len_k, tid);
      cp_async_commit();
    }

    // O += P V_j, P rounded to the input dtype (fp32 accumulate); see Note [mma fragments].
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      uint32_t pa[kMT][4];
#pragma unroll
      for (int mi = 0; mi < kMT; ++mi) c_pair_to_a<T>(pa[mi], s[mi][2 * kk], s[mi][2 * kk + 1]);
#pragma unroll
      for (int dd = 0; dd < D / 16; ++dd) {
        uint32_t bv[4];
        ldmatrix_x4_trans(bv, bt_frag_pair(sV, kLd, kk * 16, dd * 16, lane));
#pragma unroll
        for (int mi = 0; mi < kMT; ++mi) {
          mma_pair<T>(acc_o[mi][2 * dd], acc_o[mi][2 * dd + 1], pa[mi], bv);
        }
      }
    }
    __syncthreads();  // every warp is done with V_j before the next V load overwrites it
  }

  // Epilogue: O /= l, L = m*scale + log(l). Rows past Nq were computed on zero-filled Q and are dropped.
#pragma unroll
  for (int mi = 0; mi < kMT; ++mi) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row_a + mi * 16 + r * 8;
      const float sum = quad_sum(row_sum[mi][r]);
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      if (row < seq.len_q) {
        T* o_row = gO + row * p.o_row_stride + (lane % 4) * 2;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
          *reinterpret_cast<uint32_t*>(o_row + dt * 8) =
              E::pack(acc_o[mi][dt][2 * r] * inv, acc_o[mi][dt][2 * r + 1] * inv);
        if (lane % 4 == 0) gL[row] = sum > 0.f ? row_max[mi][r] * p.scale + logf(sum) : INFINITY;
      }
    }
  }
}

}  // namespace lmscale::kernels::flash
