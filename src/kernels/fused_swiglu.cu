// Fused SwiGLU gate, forward and backward; see fused_swiglu_params.h. Purely elementwise and
// memory-bound: each thread handles one vector of 16 bytes per tensor (8 bf16 or 4 fp32) when F, the
// strides and the pointers allow, one element otherwise; a grid-stride loop over all vectors.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda_check.h"
#include "kernels/fp8_amax.cuh"
#include "kernels/fused_elementwise.cuh"
#include "kernels/fused_swiglu_params.h"

namespace lmscale::kernels {
namespace {

using namespace fused;

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float a) { return 1.f / (1.f + __expf(-a)); }

// Forward writes out; Backward writes da and db from dout. Each also maxes |·| of what it stores
// into the amax slots it is given.
template <typename T, int N, bool Backward>
__global__ void __launch_bounds__(kThreads) swiglu_kernel(const SwiGluParams p, int64_t vectors) {
  const int64_t per_row = p.cols / N;
  uint32_t amax_a = 0, amax_b = 0;  // out (forward) or da; db
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < vectors;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = i / per_row, col = (i - row * per_row) * N;
    float a[N], b[N];
    load<N>(static_cast<const T*>(p.a) + row * p.a_stride + col, a);
    load<N>(static_cast<const T*>(p.b) + row * p.b_stride + col, b);
    if constexpr (!Backward) {
#pragma unroll
      for (int k = 0; k < N; ++k) {
        a[k] = a[k] * sigmoid(a[k]) * b[k];
        amax_a = max(amax_a, stored_abs_bits<T>(a[k]));
      }
      store<N>(static_cast<T*>(p.out) + row * p.cols + col, a);
    } else {
      float d[N];
      load<N>(static_cast<const T*>(p.dout) + row * p.cols + col, d);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float s = sigmoid(a[k]), silu = a[k] * s;
        const float da = d[k] * b[k] * s * (1.f + a[k] * (1.f - s));
        b[k] = d[k] * silu;  // db
        a[k] = da;
        amax_a = max(amax_a, stored_abs_bits<T>(a[k]));
        amax_b = max(amax_b, stored_abs_bits<T>(b[k]));
      }
      store<N>(static_cast<T*>(p.da) + row * p.da_stride + col, a);
      store<N>(static_cast<T*>(p.db) + row * p.db_stride + col, b);
    }
  }
  if (uint32_t* slot = Backward ? p.da_amax : p.out_amax) block_amax_commit(amax_a, slot);
  if (Backward && p.db_amax) block_amax_commit(amax_b, p.db_amax);
}

template <bool Backward>
void launch(const SwiGluParams& p, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  zero_amax(Backward ? p.da_amax : p.out_amax, st);
  if (Backward) zero_amax(p.db_amax, st);
  if (p.rows == 0 || p.cols == 0) return;
  with_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kVec = 16 / sizeof(T);
    const int64_t strides[] = {p.a_stride, p.b_stride, Backward ? p.da_stride : p.cols, Backward ? p.db_stride : p.cols};
    bool vec = p.cols % kVec == 0;
    for (int64_t s : strides) vec = vec && s % kVec == 0;
    for (const void* q : {p.a, p.b, Backward ? p.dout : static_cast<const void*>(p.out),
                          static_cast<const void*>(Backward ? p.da : p.out), static_cast<const void*>(p.db)})
      vec = vec && aligned(q, 16);
    const int64_t vectors = p.rows * p.cols / (vec ? kVec : 1);
    int64_t blocks = (vectors + kThreads - 1) / kThreads;
    if (blocks > 65536) blocks = 65536;  // the grid-stride loop covers the rest
    const dim3 grid(static_cast<unsigned>(blocks));
    auto kernel = vec ? swiglu_kernel<T, kVec, Backward> : swiglu_kernel<T, 1, Backward>;
    kernel<<<grid, kThreads, 0, st>>>(p, vectors);
  });
  LMSCALE_CUDA_CHECK_LAUNCH("swiglu kernel");
}

}  // namespace

void run_swiglu_fwd(const SwiGluParams& p, void* stream) { launch<false>(p, stream); }
void run_swiglu_bwd(const SwiGluParams& p, void* stream) { launch<true>(p, stream); }

}  // namespace lmscale::kernels
