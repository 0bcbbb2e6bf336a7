// FlashAttention-2 forward in fp32 (FlashDtype::kFP32): plain FFMA on shared-memory tiles, fp32
// throughout (scores, softmax, P, accumulation), so fp32 inputs get fp32-class results instead of
// the tensor-core kernels' bf16/fp16 rounding. One block per (batch*head, 64 query rows); it streams
// 32-key tiles of K and V with the online softmax of docs/spec.md §3. Thread layout: Note [fp32 tile
// mapping] in flash_fp32_tile.cuh. Speed is secondary (docs/flash_notes.md, "fp32 path").
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/flash_fp32.h"
#include "kernels/flash_fp32_tile.cuh"
#include "kernels/flash_head_dims.h"

namespace lmscale::kernels {
namespace flash_fp32 {

template <int D>
constexpr int fwd_smem_bytes() {
  return ((kOuter + 2 * kInner) * padded(D) + kOuter * kScoreStride) * static_cast<int>(sizeof(float));
}

template <int D, bool Masked>
__global__ void __launch_bounds__(kThreads) flash_fp32_fwd_kernel(const FlashParams p) {
  extern __shared__ float smem[];
  float* Qs = smem;                     // kOuter x (D + 1)
  float* Ks = Qs + kOuter * padded(D);  // kInner x (D + 1)
  float* Vs = Ks + kInner * padded(D);  // kInner x (D + 1)
  float* Ps = Vs + kInner * padded(D);  // kOuter x kScoreStride: this tile's probabilities

  const Head head(p, blockIdx.x / p.heads, blockIdx.x % p.heads);
  const FlashSeq& seq = head.seq;
  const int m0 = blockIdx.y * kOuter;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  if (m0 >= seq.len_q) return;  // a packed batch's shorter sequence

  load_rows<D>(Qs, head.q, p.q_row_stride, m0, kOuter, seq.len_q);

  float acc[kRowsPerThread][D / 16] = {};
  float m[kRowsPerThread], l[kRowsPerThread];  // running max and sum of each owned row
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) m[r] = -INFINITY, l[r] = 0.f;

  // Only the key tiles that hold a key some row of the block sees (Note [mask tiles], flash_fwd_kernel.cuh).
  const int k_begin = Masked ? seq.key_begin(m0) / kInner * kInner : 0;
  const int k_end = Masked ? seq.key_end(min(m0 + kOuter, seq.len_q)) : seq.len_k;
  for (int n0 = k_begin; n0 < k_end; n0 += kInner) {
    load_rows<D>(Ks, head.k, p.k_row_stride, n0, kInner, seq.len_k);
    load_rows<D>(Vs, head.v, p.v_row_stride, n0, kInner, seq.len_k);
    __syncthreads();  // Q (first pass), K and V in shared memory

    float s[kRowsPerThread][kScoreCols] = {};
    score_tile<D>(s, Qs, Ks);
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      const int row = m0 + ty * kRowsPerThread + r;
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < kScoreCols; ++c) {
        const int col = n0 + tx + 16 * c;
        const bool visible = col < seq.len_k && (!Masked || seq.sees(row, col));
        s[r][c] = visible ? s[r][c] * p.scale : -INFINITY;
        mx = fmaxf(mx, s[r][c]);
      }
      const float m_new = fmaxf(m[r], row_max(mx));
      // A row that has seen only masked keys keeps m = -inf: subtract 0 so exp gives 0, not NaN.
      const float m_safe = m_new == -INFINITY ? 0.f : m_new;
      const float correction = expf(m[r] - m_safe);  // 0 on the first visible tile (m = -inf)
      float sum = 0.f;
#pragma unroll
      for (int c = 0; c < kScoreCols; ++c) {
        s[r][c] = expf(s[r][c] - m_safe);  // masked: exp(-inf) = 0
        sum += s[r][c];
      }
      l[r] = l[r] * correction + row_sum(sum);
      m[r] = m_new;
#pragma unroll
      for (int c = 0; c < D / 16; ++c) acc[r][c] *= correction;
    }
    store_scores(Ps, s);
    __syncthreads();  // P complete
    output_tile<D>(acc, Ps, Vs);
    __syncthreads();  // K, V, P read by every thread before the next tile overwrites them
  }

  // A row that saw no key has l = 0: O = 0 and L = +inf (the mask's rule, flash_params.h).
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int row = m0 + ty * kRowsPerThread + r;
    const float inv = row < seq.len_q && l[r] > 0.f ? 1.f / l[r] : 0.f;
#pragma unroll
    for (int c = 0; c < D / 16; ++c) acc[r][c] *= inv;
    if (row < seq.len_q && tx == 0) head.lse[row] = l[r] > 0.f ? m[r] + logf(l[r]) : INFINITY;
  }
  store_output<D>(head.o, p.o_row_stride, m0, seq.len_q, acc, 1.f);
}

template <int D>
void run_fwd(const FlashParams& p, cudaStream_t stream) {
  const int m_blocks = (p.seqlen_q + kOuter - 1) / kOuter;
  const int heads = p.batch * p.heads;
  if (flash_masked(p))
    launch(flash_fp32_fwd_kernel<D, true>, p, heads, m_blocks, fwd_smem_bytes<D>(), stream, "flash_fp32_fwd_kernel");
  else
    launch(flash_fp32_fwd_kernel<D, false>, p, heads, m_blocks, fwd_smem_bytes<D>(), stream, "flash_fp32_fwd_kernel");
}

}  // namespace flash_fp32

bool flash_fp32_supported(int head_dim) { return FlashHeadDims::contains(head_dim); }

void run_flash_fp32_fwd(const FlashParams& p, void* stream) {
  with_head_dim_or_throw(FlashHeadDims{}, p.head_dim, "run_flash_fp32_fwd", "fp32", [&](auto d) {
    flash_fp32::run_fwd<decltype(d)::value>(p, static_cast<cudaStream_t>(stream));
  });
}

}  // namespace lmscale::kernels
