// Fused QKV split + RoPE, forward and backward; see fused_rope_params.h. Memory-bound: one read of
// the (B·T, 3C) activations and one write of q, k, v (and the reverse backward); fp32 math.
// One thread per (row, pair): consecutive threads walk the pairs of a row, so reads of the GEMM
// output are coalesced; writes are coalesced within each head's D-wide row.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda_check.h"
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
  __device__ static void store(void* base, int64_t i, float2 v) {
    reinterpret_cast<Vec*>(base)[i / 2] = __float22bfloat162_rn(v);
  }
};
template <>
struct Pair<float> {
  __device__ static float2 load(const void* base, int64_t i) { return reinterpret_cast<const float2*>(base)[i / 2]; }
  __device__ static void store(void* base, int64_t i, float2 v) { reinterpret_cast<float2*>(base)[i / 2] = v; }
};

// Element offsets of pair `p` (over B·T rows × C/2 pairs) in the row-major (B·T, ·) input and in the
// (B, H, T, D) outputs, plus its position t and index i within the head.
struct PairIndex {
  int64_t row, col, head_out;
  int t, i;
};
__device__ __forceinline__ PairIndex locate(int64_t p, const RopeQkvParams& s) {
  const int half = s.head_dim / 2;
  const int64_t pairs_per_row = static_cast<int64_t>(s.heads) * half;
  PairIndex x;
  x.row = p / pairs_per_row;  // b·T + t
  const int64_t in_row = p - x.row * pairs_per_row;
  const int h = static_cast<int>(in_row / half);
  x.i = static_cast<int>(in_row - static_cast<int64_t>(h) * half);
  x.t = static_cast<int>(x.row % s.seqlen);
  const int64_t b = x.row / s.seqlen;
  x.col = static_cast<int64_t>(h) * s.head_dim + 2 * x.i;
  x.head_out = ((b * s.heads + h) * s.seqlen + x.t) * s.head_dim + 2 * x.i;
  return x;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) rope_qkv_fwd_kernel(const RopeQkvParams s, int64_t total_pairs) {
  const int64_t p = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (p >= total_pairs) return;
  const PairIndex x = locate(p, s);
  const int64_t C = static_cast<int64_t>(s.heads) * s.head_dim;
  const int64_t in = x.row * s.qkv_row_stride + x.col;
  const float2 cs = reinterpret_cast<const float2*>(s.rotation)[static_cast<int64_t>(x.t) * (s.head_dim / 2) + x.i];
  const float2 q = Pair<T>::load(s.qkv_in, in), k = Pair<T>::load(s.qkv_in, in + C);
  Pair<T>::store(s.q_out, x.head_out, make_float2(q.x * cs.x - q.y * cs.y, q.x * cs.y + q.y * cs.x));
  Pair<T>::store(s.k_out, x.head_out, make_float2(k.x * cs.x - k.y * cs.y, k.x * cs.y + k.y * cs.x));
  Pair<T>::store(s.v_out, x.head_out, Pair<T>::load(s.qkv_in, in + 2 * C));
}

template <typename T>
__global__ void __launch_bounds__(kThreads) rope_qkv_bwd_kernel(const RopeQkvParams s, int64_t total_pairs) {
  const int64_t p = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (p >= total_pairs) return;
  const PairIndex x = locate(p, s);
  const int64_t C = static_cast<int64_t>(s.heads) * s.head_dim;
  const int64_t out = x.row * 3 * C + x.col;
  const float2 cs = reinterpret_cast<const float2*>(s.rotation)[static_cast<int64_t>(x.t) * (s.head_dim / 2) + x.i];
  // The rotation is orthogonal: its gradient is the rotation by −angle.
  const float2 dq = Pair<T>::load(s.q, x.head_out), dk = Pair<T>::load(s.k, x.head_out);
  Pair<T>::store(s.qkv_grad, out, make_float2(dq.x * cs.x + dq.y * cs.y, dq.y * cs.x - dq.x * cs.y));
  Pair<T>::store(s.qkv_grad, out + C, make_float2(dk.x * cs.x + dk.y * cs.y, dk.y * cs.x - dk.x * cs.y));
  Pair<T>::store(s.qkv_grad, out + 2 * C, Pair<T>::load(s.v, x.head_out));
}

template <bool Backward>
void launch(const RopeQkvParams& s, void* stream) {
  if (s.head_dim <= 0 || s.head_dim % 2)
    throw std::runtime_error("rope_qkv: head_dim must be positive and even, got " + std::to_string(s.head_dim));
  const int64_t total = static_cast<int64_t>(s.batch) * s.seqlen * s.heads * (s.head_dim / 2);
  if (total == 0) return;
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffff) throw std::runtime_error("rope_qkv: too many elements for one launch");
  auto st = static_cast<cudaStream_t>(stream);
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

void run_rope_qkv_fwd(const RopeQkvParams& s, void* stream) { launch<false>(s, stream); }
void run_rope_qkv_bwd(const RopeQkvParams& s, void* stream) { launch<true>(s, stream); }

}  // namespace lmscale::kernels
