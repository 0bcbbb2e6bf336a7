// Fused QKV split + RoPE, forward and backward; see fused_rope_params.h. Memory-bound: one read of
// the (B·T, 3C) activations and one write of q, k, v (and the reverse backward); fp32 math.
// One thread per (row, pair): consecutive threads walk the pairs of a row, so reads of the GEMM
// output are coalesced; writes are coalesced within each head's D-wide row. The delayed-scaling
// backward (FP8 out) walks 64×64 tiles of the (B·T, 3C) gradient instead, to write its transpose too.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/fp8_amax.cuh"
#include "kernels/fp8_delayed.cuh"
#include "kernels/fused_rope_params.h"

namespace lmscale::kernels {
namespace {

constexpr int kThreads = 256;

template <typename T>
struct Pair;
template <>
struct Pair<__nv_bfloat16> {
  using Vec = __nv_bfloat162;
  __device__ static float2 load(const void* base, int64_t i) {
    return __bfloat1622float2(reinterpret_cast<const Vec*>(base)[i / 2]);
  }
  // Returns v as stored (rounded to bf16), for the amax.
  __device__ static float2 store(void* base, int64_t i, float2 v) {
    const Vec r = __float22bfloat162_rn(v);
    reinterpret_cast<Vec*>(base)[i / 2] = r;
    return __bfloat1622float2(r);
  }
};
template <>
struct Pair<float> {
  __device__ static float2 load(const void* base, int64_t i) { return reinterpret_cast<const float2*>(base)[i / 2]; }
  __device__ static float2 store(void* base, int64_t i, float2 v) {
    reinterpret_cast<float2*>(base)[i / 2] = v;
    return v;
  }
};

// Element offsets of pair `p` (over B·T rows × C/2 pairs) in the row-major (B·T, ·) input and in the
// (B, H, T, D) outputs, the width C of one of q/k/v, and the pair's (cos, sin).
struct PairIndex {
  int64_t row, col, head_out, C;
  float2 cs;
};

// (x0, x1) rotated by the angle whose (cos, sin) is cs; sign −1 rotates back (the transpose).
__device__ __forceinline__ float2 rotate(float2 v, float2 cs, float sign) {
  const float s = sign * cs.y;
  return make_float2(v.x * cs.x - v.y * s, v.x * s + v.y * cs.x);
}
__device__ __forceinline__ PairIndex locate(int64_t p, const RopeQkvParams& s) {
  const int half = s.head_dim / 2;
  const int64_t pairs_per_row = static_cast<int64_t>(s.heads) * half;
  PairIndex x;
  x.row = p / pairs_per_row;  // b·T + t
  const int64_t in_row = p - x.row * pairs_per_row;
  const int h = static_cast<int>(in_row / half);
  const int i = static_cast<int>(in_row - static_cast<int64_t>(h) * half);
  const int64_t t = x.row % s.seqlen, b = x.row / s.seqlen;
  x.col = static_cast<int64_t>(h) * s.head_dim + 2 * i;
  x.head_out = ((b * s.heads + h) * s.seqlen + t) * s.head_dim + 2 * i;
  x.C = static_cast<int64_t>(s.heads) * s.head_dim;
  x.cs = reinterpret_cast<const float2*>(s.rotation)[t * half + i];
  return x;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) rope_qkv_fwd_kernel(const RopeQkvParams s, int64_t total_pairs) {
  const int64_t p = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (p >= total_pairs) return;
  const PairIndex x = locate(p, s);
  const int64_t in = x.row * s.qkv_row_stride + x.col;
  Pair<T>::store(s.q_out, x.head_out, rotate(Pair<T>::load(s.qkv_in, in), x.cs, 1.f));
  Pair<T>::store(s.k_out, x.head_out, rotate(Pair<T>::load(s.qkv_in, in + x.C), x.cs, 1.f));
  Pair<T>::store(s.v_out, x.head_out, Pair<T>::load(s.qkv_in, in + 2 * x.C));
}

__device__ __forceinline__ uint32_t max_abs_bits(uint32_t m, float2 v) {
  return max(m, max(abs_bits(v.x), abs_bits(v.y)));
}

template <typename T>
__global__ void __launch_bounds__(kThreads) rope_qkv_bwd_kernel(const RopeQkvParams s, int64_t total_pairs) {
  const int64_t p = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  uint32_t amax = 0;  // of what this thread stores; no early return: the block commits it together
  if (p < total_pairs) {
    const PairIndex x = locate(p, s);
    const int64_t out = x.row * 3 * x.C + x.col;
    // The rotation is orthogonal: its gradient is the rotation by −angle.
    amax = max_abs_bits(amax, Pair<T>::store(s.qkv_grad, out, rotate(Pair<T>::load(s.q, x.head_out), x.cs, -1.f)));
    amax = max_abs_bits(amax, Pair<T>::store(s.qkv_grad, out + x.C, rotate(Pair<T>::load(s.k, x.head_out), x.cs, -1.f)));
    amax = max_abs_bits(amax, Pair<T>::store(s.qkv_grad, out + 2 * x.C, Pair<T>::load(s.v, x.head_out)));
  }
  if (s.qkv_grad_amax) block_amax_commit(amax, s.qkv_grad_amax);
}

// Delayed scaling, bf16: block (bx, by) owns rows [64·by, +64) and cols [64·bx, +64) of the (B·T, 3C)
// gradient. A segment is 8 columns of one head of one of q/k/v (D a multiple of 8), i.e. 8 consecutive
// elements of dq, dk or dv at (b, h, t): one 16-byte load, 4 pairs rotated back (dv copied) exactly as
// rope_qkv_bwd_kernel does, rounded to bf16, quantized, written row-major and into the tile; then the
// tile transposed (fp8_delayed.cuh).
__global__ void __launch_bounds__(fp8_tile::kThreads) rope_qkv_bwd_fp8_kernel(const RopeQkvParams s) {
  using T = __nv_bfloat16;
  using namespace fp8_tile;
  __shared__ __align__(16) Tile tile;
  const Fp8DelayedOut& o = s.qkv_grad_fp8;
  const float scale = o.history->scale;
  const auto f = static_cast<Fp8Format>(o.history->format);
  const int half = s.head_dim / 2;
  const int64_t C = static_cast<int64_t>(s.heads) * s.head_dim, cols = 3 * C;
  const int64_t rows = static_cast<int64_t>(s.batch) * s.seqlen;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTile, col0 = static_cast<int64_t>(blockIdx.x) * kTile;
  uint32_t amax = 0;
  for (int i = threadIdx.x; i < kSegs; i += kThreads) {
    int r, c;
    segment(i, r, c);
    const int64_t gr = row0 + r, gc = col0 + c;
    if (gr >= rows || gc >= cols) continue;
    const int part = static_cast<int>(gc / C);  // 0 q, 1 k, 2 v
    const int64_t in_part = gc - part * C;
    const int h = static_cast<int>(in_part / s.head_dim), d = static_cast<int>(in_part - int64_t{h} * s.head_dim);
    const int64_t t = gr % s.seqlen, b = gr / s.seqlen;
    const void* src = part == 0 ? s.q : part == 1 ? s.k : s.v;
    const int64_t at = ((b * s.heads + h) * s.seqlen + t) * s.head_dim + d;
    float v[kSeg];
    fused::load<kSeg>(static_cast<const T*>(src) + at, v);
    if (part < 2) {
      const float2* cs = reinterpret_cast<const float2*>(s.rotation) + t * half + d / 2;
#pragma unroll
      for (int j = 0; j < kSeg / 2; ++j) {
        const float2 w = rotate(make_float2(v[2 * j], v[2 * j + 1]), cs[j], -1.f);
        v[2 * j] = w.x, v[2 * j + 1] = w.y;
      }
    }
#pragma unroll
    for (int k = 0; k < kSeg; ++k) {
      v[k] = fused::rounded<T>(v[k]);
      amax = max(amax, abs_bits(v[k]));
    }
    if (s.qkv_grad) fused::store<kSeg>(static_cast<T*>(s.qkv_grad) + gr * cols + gc, v);
    put(o, tile, cols, r, c, gr, gc, quantize8(v, scale, f));
  }
  commit_amax(amax, o.history);
  __syncthreads();  // commit_amax's barriers already order the tile; this one says so where it matters
  if (o.data_t) put_transposed(o.data_t, tile, rows, cols, row0, col0);
}

template <bool Backward>
void launch(const RopeQkvParams& s, void* stream) {
  if (s.head_dim <= 0 || s.head_dim % 2)
    throw std::runtime_error("rope_qkv: head_dim must be positive and even, got " + std::to_string(s.head_dim));
  const int64_t total = static_cast<int64_t>(s.batch) * s.seqlen * s.heads * (s.head_dim / 2);
  auto st = static_cast<cudaStream_t>(stream);
  if (Backward) zero_amax(s.qkv_grad_amax, st);
  if (total == 0) return;
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffff) throw std::runtime_error("rope_qkv: too many elements for one launch");
  const dim3 grid(static_cast<unsigned>(blocks));
  if (s.dtype == RopeDtype::kBF16) {
    if (Backward) rope_qkv_bwd_kernel<__nv_bfloat16><<<grid, kThreads, 0, st>>>(s, total);
    else rope_qkv_fwd_kernel<__nv_bfloat16><<<grid, kThreads, 0, st>>>(s, total);
  } else {
    if (Backward) rope_qkv_bwd_kernel<float><<<grid, kThreads, 0, st>>>(s, total);
    else rope_qkv_fwd_kernel<float><<<grid, kThreads, 0, st>>>(s, total);
  }
  LMSCALE_CUDA_CHECK_LAUNCH("rope_qkv kernel");
}

}  // namespace

bool rope_qkv_fp8_ok(const RopeQkvParams& s) {
  const Fp8DelayedOut& o = s.qkv_grad_fp8;
  auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return s.dtype == RopeDtype::kBF16 && s.head_dim > 0 && s.head_dim % 8 == 0 &&
         (static_cast<int64_t>(s.batch) * s.seqlen) % 16 == 0 && o.history && o.data && aligned16(o.data) &&
         (!o.data_t || aligned16(o.data_t)) && aligned16(s.q) && aligned16(s.k) && aligned16(s.v) &&
         (!s.qkv_grad || aligned16(s.qkv_grad));
}

void run_rope_qkv_fwd(const RopeQkvParams& s, void* stream) { launch<false>(s, stream); }
void run_rope_qkv_bwd(const RopeQkvParams& s, void* stream) { launch<true>(s, stream); }

void run_rope_qkv_bwd_fp8(const RopeQkvParams& s, void* stream) {
  if (!rope_qkv_fp8_ok(s))
    throw std::runtime_error("run_rope_qkv_bwd_fp8: needs bf16, B*T a multiple of 16, head_dim a multiple of 8, "
                             "16-byte aligned pointers and an FP8 output with its history (rope_qkv_fp8_ok)");
  const int64_t rows = static_cast<int64_t>(s.batch) * s.seqlen, cols = 3LL * s.heads * s.head_dim;
  if (rows == 0) return;
  const dim3 grid = fp8_tile::tile_grid(rows, cols, "rope_qkv_bwd_fp8_kernel");
  rope_qkv_bwd_fp8_kernel<<<grid, fp8_tile::kThreads, 0, static_cast<cudaStream_t>(stream)>>>(s);
  LMSCALE_CUDA_CHECK_LAUNCH("rope_qkv_bwd_fp8_kernel");
}

}  // namespace lmscale::kernels
