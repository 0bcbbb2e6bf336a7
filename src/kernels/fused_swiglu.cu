// Fused SwiGLU gate, forward and backward; see fused_swiglu_params.h. Purely elementwise and
// memory-bound: each thread handles one vector of 16 bytes per tensor (8 bf16 or 4 fp32) when F, the
// strides and the pointers allow, one element otherwise; a grid-stride loop over all vectors. The
// delayed-scaling variants (FP8 out) walk 64×64 tiles instead, to write the transposed copy too.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdexcept>

#include "kernels/cuda_check.h"
#include "kernels/fp8_amax.cuh"
#include "kernels/fp8_delayed.cuh"
#include "kernels/fused_elementwise.cuh"
#include "kernels/fused_swiglu_params.h"

namespace lmscale::kernels {
namespace {

using namespace fused;

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float a) { return 1.f / (1.f + __expf(-a)); }

// The gate's math, one definition for the bf16 and the FP8-out kernels (their stored values then agree
// bit for bit, which the fused cast's tests rely on).
__device__ __forceinline__ float swiglu_value(float a, float b) { return a * sigmoid(a) * b; }
__device__ __forceinline__ void swiglu_grads(float a, float b, float d, float& da, float& db) {
  const float s = sigmoid(a), silu = a * s;
  da = d * b * s * (1.f + a * (1.f - s));
  db = d * silu;
}

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
        a[k] = swiglu_value(a[k], b[k]);
        amax_a = max(amax_a, stored_abs_bits<T>(a[k]));
      }
      store<N>(static_cast<T*>(p.out) + row * p.cols + col, a);
    } else {
      float d[N];
      load<N>(static_cast<const T*>(p.dout) + row * p.cols + col, d);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        float da, db;
        swiglu_grads(a[k], b[k], d[k], da, db);
        a[k] = da;
        b[k] = db;
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

// Delayed scaling, bf16: block (bx, by) owns rows [64·by, +64) and cols [64·bx, +64). Phase 1: each
// thread computes 8-element row segments, rounds them to bf16 (the values the bf16 kernel stores),
// quantizes them with the history's scale, writes the FP8 bytes row-major and into the tile; phase 2
// writes the tile transposed (fp8_delayed.cuh). Forward: out; Backward: da and db, two tiles.
template <bool Backward>
__global__ void __launch_bounds__(fp8_tile::kThreads) swiglu_fp8_kernel(const SwiGluParams p) {
  using T = __nv_bfloat16;
  using namespace fp8_tile;
  __shared__ __align__(16) Tile tile_a;
  __shared__ __align__(16) Tile tile_b;  // db's tile (backward only)
  const Fp8DelayedOut& oa = Backward ? p.da_fp8 : p.out_fp8;
  const float sa = oa.history->scale, sb = Backward ? p.db_fp8.history->scale : 0.f;
  const auto fa = static_cast<Fp8Format>(oa.history->format);
  const auto fb = Backward ? static_cast<Fp8Format>(p.db_fp8.history->format) : fa;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTile, col0 = static_cast<int64_t>(blockIdx.x) * kTile;
  uint32_t amax_a = 0, amax_b = 0;
  for (int i = threadIdx.x; i < kSegs; i += kThreads) {
    int r, c;
    segment(i, r, c);
    const int64_t gr = row0 + r, gc = col0 + c;
    if (gr >= p.rows || gc >= p.cols) continue;  // cols a multiple of 16: segments are whole
    float a[kSeg], b[kSeg];
    load<kSeg>(static_cast<const T*>(p.a) + gr * p.a_stride + gc, a);
    load<kSeg>(static_cast<const T*>(p.b) + gr * p.b_stride + gc, b);
    if constexpr (!Backward) {
#pragma unroll
      for (int k = 0; k < kSeg; ++k) {
        a[k] = rounded<T>(swiglu_value(a[k], b[k]));
        amax_a = max(amax_a, abs_bits(a[k]));
      }
      if (p.out) store<kSeg>(static_cast<T*>(p.out) + gr * p.cols + gc, a);
    } else {
      float d[kSeg];
      load<kSeg>(static_cast<const T*>(p.dout) + gr * p.cols + gc, d);
#pragma unroll
      for (int k = 0; k < kSeg; ++k) {
        float da, db;
        swiglu_grads(a[k], b[k], d[k], da, db);
        a[k] = rounded<T>(da);
        b[k] = rounded<T>(db);
        amax_a = max(amax_a, abs_bits(a[k]));
        amax_b = max(amax_b, abs_bits(b[k]));
      }
      if (p.da) store<kSeg>(static_cast<T*>(p.da) + gr * p.da_stride + gc, a);
      if (p.db) store<kSeg>(static_cast<T*>(p.db) + gr * p.db_stride + gc, b);
      put(p.db_fp8, tile_b, p.cols, r, c, gr, gc, quantize8(b, sb, fb));
    }
    put(oa, tile_a, p.cols, r, c, gr, gc, quantize8(a, sa, fa));
  }
  commit_amax(amax_a, oa.history);
  if (Backward) commit_amax(amax_b, p.db_fp8.history);
  __syncthreads();  // commit_amax's barriers already order the tiles; this one says so where it matters
  if (oa.data_t) put_transposed(oa.data_t, tile_a, p.rows, p.cols, row0, col0);
  if (Backward && p.db_fp8.data_t) put_transposed(p.db_fp8.data_t, tile_b, p.rows, p.cols, row0, col0);
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

template <bool Backward>
void launch_fp8(const SwiGluParams& p, void* stream) {
  if (!swiglu_fp8_ok(p, Backward))
    throw std::runtime_error("run_swiglu_*_fp8: needs bf16, rows and cols multiples of 16, row strides multiples "
                             "of 8 and 16-byte aligned pointers, and an FP8 output per history (swiglu_fp8_ok)");
  if (p.rows == 0 || p.cols == 0) return;
  const dim3 grid = fp8_tile::tile_grid(p.rows, p.cols, "swiglu_fp8_kernel");
  swiglu_fp8_kernel<Backward><<<grid, fp8_tile::kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  LMSCALE_CUDA_CHECK_LAUNCH("swiglu_fp8_kernel");
}

}  // namespace

bool swiglu_fp8_ok(const SwiGluParams& p, bool backward) {
  if (p.dtype != FusedDtype::kBF16 || p.rows % 16 || p.cols % 16 || p.a_stride % 8 || p.b_stride % 8) return false;
  const Fp8DelayedOut* outs[] = {backward ? &p.da_fp8 : &p.out_fp8, backward ? &p.db_fp8 : &p.out_fp8};
  for (const auto* o : outs)
    if (!o->history || !o->data || !aligned(o->data, 16) || (o->data_t && !aligned(o->data_t, 16))) return false;
  const void* ptrs[] = {p.a, p.b, backward ? p.dout : p.a};
  for (const void* q : ptrs)
    if (!q || !aligned(q, 16)) return false;
  if (backward && ((p.da && (p.da_stride % 8 || !aligned(p.da, 16))) || (p.db && (p.db_stride % 8 || !aligned(p.db, 16)))))
    return false;
  return backward || !p.out || aligned(p.out, 16);
}

void run_swiglu_fwd(const SwiGluParams& p, void* stream) { launch<false>(p, stream); }
void run_swiglu_bwd(const SwiGluParams& p, void* stream) { launch<true>(p, stream); }
void run_swiglu_fwd_fp8(const SwiGluParams& p, void* stream) { launch_fp8<false>(p, stream); }
void run_swiglu_bwd_fp8(const SwiGluParams& p, void* stream) { launch_fp8<true>(p, stream); }

}  // namespace lmscale::kernels
