// Fused cross-entropy over the vocabulary, forward and backward; see fused_cross_entropy_params.h.
// One block per row. A row of V logits is rarely 16-byte aligned (V = 10 000 bf16 rows start every
// 20 000 bytes, V odd ones anywhere), so each row is walked as a scalar head up to the first
// 16-byte boundary, 16-byte vectors, and a scalar tail. The backward's gradient rows have the same
// stride and base alignment as the logits, so the same split serves both.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda_check.h"
#include "kernels/fused_cross_entropy_params.h"
#include "kernels/fused_elementwise.cuh"

namespace lmscale::kernels {
namespace {

using namespace fused;

constexpr int kThreads = 256;

// The row's split: elements [0, head) and [body_end, V) one at a time, [head, body_end) in vectors of N.
template <typename T, int N>
struct RowSplit {
  int64_t head, body_end;
  __device__ RowSplit(const T* row, int64_t V, bool vec) {
    if (!vec) {
      head = body_end = V;
      return;
    }
    const int64_t misalign = (reinterpret_cast<uintptr_t>(row) % 16) / sizeof(T);
    head = misalign ? N - misalign : 0;
    if (head > V) head = V;
    body_end = head + (V - head) / N * N;
  }
};

template <typename T, int N>
__global__ void __launch_bounds__(kThreads) cross_entropy_fwd_kernel(const CrossEntropyParams p, bool vec) {
  __shared__ float scratch[64];
  const int64_t row = blockIdx.x;
  const T* z = static_cast<const T*>(p.logits) + row * p.logits_stride;
  const RowSplit<T, N> split(z, p.vocab, vec);
  MaxSum acc{-INFINITY, 0.f};
  float total = 0.f;  // Σ_j z_j, read by label smoothing only
  for (int64_t j = threadIdx.x; j < split.head; j += kThreads) {
    const float v = to_float(z[j]);
    acc = merge(acc, MaxSum{v, 1.f});
    total += v;
  }
#pragma unroll 2
  for (int64_t j = split.head + static_cast<int64_t>(threadIdx.x) * N; j < split.body_end; j += kThreads * N) {
    float v[N];
    load<N>(z + j, v);
    float m = v[0];
#pragma unroll
    for (int k = 1; k < N; ++k) m = fmaxf(m, v[k]);
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < N; ++k) s += __expf(v[k] - m), total += v[k];
    acc = merge(acc, MaxSum{m, s});
  }
  for (int64_t j = split.body_end + threadIdx.x; j < p.vocab; j += kThreads) {
    const float v = to_float(z[j]);
    acc = merge(acc, MaxSum{v, 1.f});
    total += v;
  }
  acc = block_merge(acc, scratch);
  const float eps = p.label_smoothing;
  if (eps != 0.f) total = block_sum(total, scratch);  // uniform branch; block_sum's leading barrier guards scratch
  if (threadIdx.x == 0) {
    const float log_sum = __logf(acc.s);
    const int64_t t = p.targets[row];
    p.row_max[row] = acc.m;
    p.row_log_sum[row] = log_sum;
    float loss = __int_as_float(0x7fc00000);  // NaN: a target outside [0, V) that is not ignore_index
    if (t == p.ignore_index) {
      loss = 0.f;
    } else if (t >= 0 && t < p.vocab) {
      loss = log_sum - (to_float(z[t]) - acc.m);
      if (eps != 0.f) loss = (1.f - eps) * loss + eps * (log_sum - (total / static_cast<float>(p.vocab) - acc.m));
    }
    p.loss_out[row] = loss;
  }
}

template <typename T, int N>
__global__ void __launch_bounds__(kThreads) cross_entropy_bwd_kernel(const CrossEntropyParams p, bool vec) {
  const int64_t row = blockIdx.x;
  const T* z = static_cast<const T*>(p.logits) + row * p.logits_stride;
  T* dz = static_cast<T*>(p.dlogits_out) + row * p.logits_stride;
  const RowSplit<T, N> split(z, p.vocab, vec);
  const int64_t t = p.targets[row];
  const bool ignored = t == p.ignore_index;  // the whole row's gradient is 0 (uniform in the block)
  const float m = p.row_max[row], log_sum = p.row_log_sum[row];
  const float scale = ignored ? 0.f : p.grad_loss[row * p.grad_loss_stride] * p.grad_factor;
  const float hit = 1.f - p.label_smoothing, spread = p.label_smoothing / static_cast<float>(p.vocab);
  auto grad = [&](float v, int64_t j) {
    return ignored ? 0.f : scale * (__expf((v - m) - log_sum) - (j == t ? hit : 0.f) - spread);
  };
  for (int64_t j = threadIdx.x; j < split.head; j += kThreads) dz[j] = from_float<T>(grad(to_float(z[j]), j));
#pragma unroll 2
  for (int64_t j = split.head + static_cast<int64_t>(threadIdx.x) * N; j < split.body_end; j += kThreads * N) {
    float v[N];
    load<N>(z + j, v);
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = grad(v[k], j + k);
    store<N>(dz + j, v);
  }
  for (int64_t j = split.body_end + threadIdx.x; j < p.vocab; j += kThreads)
    dz[j] = from_float<T>(grad(to_float(z[j]), j));
}

template <bool Backward>
void launch(const CrossEntropyParams& p, void* stream) {
  if (p.rows == 0) return;
  if (p.vocab <= 0) throw std::runtime_error("cross_entropy: the vocabulary is empty");
  if (p.rows > 0x7fffffff) throw std::runtime_error("cross_entropy: more than 2^31 - 1 rows in one launch");
  auto st = static_cast<cudaStream_t>(stream);
  const dim3 grid(static_cast<unsigned>(p.rows));
  with_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kVec = 16 / sizeof(T);
    // Each row finds its own 16-byte boundary; the backward needs it at the same column in both tensors.
    const uintptr_t in = reinterpret_cast<uintptr_t>(p.logits), out = reinterpret_cast<uintptr_t>(p.dlogits_out);
    const bool vec = !Backward || (in - out) % 16 == 0;
    if (Backward) cross_entropy_bwd_kernel<T, kVec><<<grid, kThreads, 0, st>>>(p, vec);
    else cross_entropy_fwd_kernel<T, kVec><<<grid, kThreads, 0, st>>>(p, vec);
  });
  LMSCALE_CUDA_CHECK_LAUNCH("cross_entropy kernel");
}

}  // namespace

void run_cross_entropy_fwd(const CrossEntropyParams& p, void* stream) { launch<false>(p, stream); }
void run_cross_entropy_bwd(const CrossEntropyParams& p, void* stream) { launch<true>(p, stream); }

}  // namespace lmscale::kernels
