// Fused residual add + RMSNorm, forward and backward; see fused_rmsnorm_params.h. Memory-bound.
// Forward: one block per row; pass 1 reads x and the residual, writes h and sums h²; pass 2 reads h
// back (from L2: the row was just written) and writes y. Backward: a fixed grid of blocks walks the
// rows; per row pass 1 sums g·dy·h, pass 2 writes dx (and the residual's copy) and adds dy·h·rstd
// into the block's dg partial, kept in shared memory; a second small kernel sums the partials.
// Vectors of 4 elements when C and every pointer allow, single elements otherwise.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda_check.h"
#include "kernels/fp8_amax.cuh"
#include "kernels/fp8_delayed.cuh"
#include "kernels/fused_elementwise.cuh"
#include "kernels/fused_rmsnorm_params.h"
#include "kernels/sm_count.h"

namespace lmscale::kernels {
namespace {

using namespace fused;

template <typename TX, typename TR, typename TY, int N>
__global__ void add_rmsnorm_fwd_kernel(const AddRmsNormFwdParams p) {
  __shared__ float scratch[32];
  const int C = p.cols;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * C;
  const TX* x = static_cast<const TX*>(p.x) + base;
  const TR* r = p.residual ? static_cast<const TR*>(p.residual) + base : nullptr;
  TX* h = r ? static_cast<TX*>(p.h_out) + base : nullptr;
  float ss = 0.f;
  for (int c = threadIdx.x * N; c < C; c += blockDim.x * N) {
    float v[N];
    load<N>(x + c, v);
    if (r) {
      float w[N];
      load<N>(r + c, w);
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] = rounded<TX>(v[i] + w[i]);  // the norm sees h as stored
      store<N>(h + c, v);
    }
#pragma unroll
    for (int i = 0; i < N; ++i) ss += v[i] * v[i];
  }
  const float rstd = rsqrtf(block_sum(ss, scratch) / C + p.eps);
  if (threadIdx.x == 0) p.rstd_out[blockIdx.x] = rstd;
  const TX* hr = r ? h : x;  // each thread reads back only what it wrote itself
  TY* y = p.y_out ? static_cast<TY*>(p.y_out) + base : nullptr;
  // Delayed scaling: the FP8 bytes of y as stored, with the scale the history holds for this step.
  Fp8History* yh = p.y_fp8.history;
  uint8_t* yq = yh ? static_cast<uint8_t*>(p.y_fp8.data) + base : nullptr;
  const float ys = yh ? yh->scale : 0.f;
  const auto yf = yh ? static_cast<Fp8Format>(yh->format) : Fp8Format::kE4M3;
  uint32_t amax = 0;
  for (int c = threadIdx.x * N; c < C; c += blockDim.x * N) {
    float v[N], g[N];
    load<N>(hr + c, v);
    load<N>(p.gain + c, g);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      v[i] = rounded<TY>(v[i] * rstd * g[i]);  // as stored: the store below writes the same bits
      amax = max(amax, abs_bits(v[i]));
    }
    if (y) store<N>(y + c, v);
    if (yq) fp8_tile::store_fp8<N>(yq + c, v, ys, yf);
  }
  if (yh) fp8_tile::commit_amax(amax, yh);
  else if (p.y_amax) block_amax_commit(amax, p.y_amax);
}

template <typename TH, typename TR, typename TY, int N>
__global__ void add_rmsnorm_bwd_kernel(const AddRmsNormBwdParams p) {
  extern __shared__ float dgain[];  // C: this block's partial of dg; thread t owns the columns it walks
  __shared__ float scratch[32];
  const int C = p.cols;
  uint32_t amax = 0;  // of the residual's gradient as stored
  for (int c = threadIdx.x * N; c < C; c += blockDim.x * N)
#pragma unroll
    for (int i = 0; i < N; ++i) dgain[c + i] = 0.f;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t base = row * C;
    const TH* h = static_cast<const TH*>(p.h) + base;
    const TY* dy = static_cast<const TY*>(p.dy) + base;
    const float rstd = p.rstd[row];
    float dot = 0.f;
    for (int c = threadIdx.x * N; c < C; c += blockDim.x * N) {
      float hv[N], dv[N], g[N];
      load<N>(h + c, hv);
      load<N>(dy + c, dv);
      load<N>(p.gain + c, g);
#pragma unroll
      for (int i = 0; i < N; ++i) dot += g[i] * dv[i] * hv[i];
    }
    const float k = block_sum(dot, scratch) * rstd * rstd * rstd / C;
    const TH* dh_in = p.dh_in ? static_cast<const TH*>(p.dh_in) + base : nullptr;
    TH* dx = static_cast<TH*>(p.dx_out) + base;
    TR* dres = p.dresidual_out ? static_cast<TR*>(p.dresidual_out) + base : nullptr;
    for (int c = threadIdx.x * N; c < C; c += blockDim.x * N) {
      float hv[N], dv[N], g[N], out[N];
      load<N>(h + c, hv);
      load<N>(dy + c, dv);
      load<N>(p.gain + c, g);
      if (dh_in) load<N>(dh_in + c, out);
#pragma unroll
      for (int i = 0; i < N; ++i) {
        out[i] = (dh_in ? out[i] : 0.f) + rstd * g[i] * dv[i] - k * hv[i];
        dgain[c + i] += dv[i] * hv[i] * rstd;
        amax = max(amax, dres ? stored_abs_bits<TR>(out[i]) : stored_abs_bits<TH>(out[i]));
      }
      store<N>(dx + c, out);
      if (dres) store<N>(dres + c, out);
    }
  }
  float* partial = p.dgain_partial + static_cast<int64_t>(blockIdx.x) * C;
  for (int c = threadIdx.x * N; c < C; c += blockDim.x * N)
#pragma unroll
    for (int i = 0; i < N; ++i) partial[c + i] = dgain[c + i];
  if (p.dresidual_amax) block_amax_commit(amax, p.dresidual_amax);
}

// dg[c] = Σ_b partial[b, c]. A block takes 32 columns (one coalesced 128-byte row segment per warp)
// and splits the partial rows into 32 slices, one per warp; the slice sums then add in a fixed
// order, so the result is deterministic. (One thread per column walking all rows serially was
// latency-bound: ~20 µs of a ~40 µs backward at d = 768.)
constexpr int kSumCols = 32, kSumSlices = 32;
__global__ void __launch_bounds__(kSumCols* kSumSlices)
    sum_partials_kernel(const float* partial, int64_t partial_rows, int cols, float* out) {
  __shared__ float slice_sum[kSumSlices][kSumCols + 1];
  const int c = blockIdx.x * kSumCols + threadIdx.x;
  float acc = 0.f;
  if (c < cols) {
#pragma unroll 4
    for (int64_t b = threadIdx.y; b < partial_rows; b += kSumSlices) acc += partial[b * cols + c];
  }
  slice_sum[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = 0.f;
    for (int k = 0; k < kSumSlices; ++k) total += slice_sum[k][threadIdx.x];
    out[c] = total;
  }
}

void check_cols(int cols, const char* what) {
  if (cols <= 0 || cols > kRmsNormMaxCols)
    throw std::runtime_error(std::string(what) + ": row width " + std::to_string(cols) + " is outside 1.." +
                             std::to_string(kRmsNormMaxCols) + "; use the unfused RMSNorm for such rows");
}

}  // namespace

int64_t rms_norm_bwd_partial_rows(int64_t rows) {
  const int64_t blocks = 4 * static_cast<int64_t>(current_sm_count());  // enough threads in flight per SM
  return rows < blocks ? rows : blocks;
}

void run_rms_norm_fwd(const AddRmsNormFwdParams& p, void* stream) {
  check_cols(p.cols, "rms_norm forward");
  auto st = static_cast<cudaStream_t>(stream);
  zero_amax(p.y_amax, st);
  if (p.rows == 0) return;
  if (p.rows > 0x7fffffff) throw std::runtime_error("rms_norm forward: more than 2^31 - 1 rows in one launch");
  const bool vec = p.cols % 4 == 0 && aligned(p.x, 16) && aligned(p.residual, 16) && aligned(p.h_out, 16) &&
                   aligned(p.y_out, 16) && aligned(p.gain, 16) && aligned(p.y_fp8.data, 4);
  if (p.y_fp8.history && (p.y_dtype != FusedDtype::kBF16 || !p.y_fp8.data))
    throw std::runtime_error("rms_norm forward: an FP8 y (delayed scaling) needs bf16 y and its FP8 buffer");
  const int threads = threads_for_row(vec ? p.cols / 4 : p.cols);
  with_types(p.x_dtype, p.residual_dtype, p.y_dtype, [&](auto tx, auto tr, auto ty) {
    using TX = typename decltype(tx)::type;
    using TR = typename decltype(tr)::type;
    using TY = typename decltype(ty)::type;
    auto kernel = vec ? add_rmsnorm_fwd_kernel<TX, TR, TY, 4> : add_rmsnorm_fwd_kernel<TX, TR, TY, 1>;
    kernel<<<static_cast<unsigned>(p.rows), threads, 0, st>>>(p);
  });
  LMSCALE_CUDA_CHECK_LAUNCH("rms_norm forward kernel");
}

void run_rms_norm_bwd(const AddRmsNormBwdParams& p, void* stream) {
  check_cols(p.cols, "rms_norm backward");
  auto st = static_cast<cudaStream_t>(stream);
  zero_amax(p.dresidual_amax, st);
  if (p.rows == 0) {
    LMSCALE_CUDA_CHECK(cudaMemsetAsync(p.dgain_out, 0, sizeof(float) * p.cols, st));
    return;
  }
  const int64_t blocks = rms_norm_bwd_partial_rows(p.rows);
  const bool vec = p.cols % 4 == 0 && aligned(p.h, 16) && aligned(p.dy, 16) && aligned(p.dh_in, 16) &&
                   aligned(p.dx_out, 16) && aligned(p.dresidual_out, 16) && aligned(p.gain, 16) &&
                   aligned(p.dgain_partial, 16);
  const int threads = threads_for_row(vec ? p.cols / 4 : p.cols);
  const size_t smem = sizeof(float) * p.cols;
  with_types(p.h_dtype, p.residual_dtype, p.y_dtype, [&](auto th, auto tr, auto ty) {
    using TH = typename decltype(th)::type;
    using TR = typename decltype(tr)::type;
    using TY = typename decltype(ty)::type;
    auto kernel = vec ? add_rmsnorm_bwd_kernel<TH, TR, TY, 4> : add_rmsnorm_bwd_kernel<TH, TR, TY, 1>;
    if (smem > 32 * 1024)  // over the 48 KiB default with the static scratch; legal while capturing
      LMSCALE_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    kernel<<<static_cast<unsigned>(blocks), threads, smem, st>>>(p);
  });
  LMSCALE_CUDA_CHECK_LAUNCH("rms_norm backward kernel");
  sum_partials_kernel<<<(p.cols + kSumCols - 1) / kSumCols, dim3(kSumCols, kSumSlices), 0, st>>>(
      p.dgain_partial, blocks, p.cols, p.dgain_out);
  LMSCALE_CUDA_CHECK_LAUNCH("rms_norm dgain column sum");
}

}  // namespace lmscale::kernels
