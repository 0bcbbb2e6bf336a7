// Multi-tensor AdamW with the bf16 weight copy written in the same pass; see fused_adamw_params.h.
// Memory-bound: per element it reads p, g, m, v (16 B) and writes p, m, v (+ the bf16 copy): 28 or
// 30 B. Each block takes one chunk of one tensor; blocks find their tensor by scanning the ≤32 sizes.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda_check.h"
#include "kernels/fp8_delayed.cuh"
#include "kernels/fp8_scale.h"
#include "kernels/fused_adamw_params.h"

namespace lmscale::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kVec = 4;                           // float4 per thread per iteration
constexpr int kChunk = kThreads * kVec * 4;       // elements per block: 4 float4 per thread

// The kernels build with --use_fast_math, which turns `/` and sqrtf into approximations (~2 ulp):
// the update divides twice, so spell out the IEEE-rounded forms and match ATen's fp32 AdamW.
__device__ __forceinline__ void adamw_one(float& p, float g, float& m, float& v, const AdamWHyper& h,
                                          float step_size, float bc2_sqrt) {
  p -= h.lr * h.weight_decay * p;
  m = h.beta1 * m + (1.f - h.beta1) * g;
  v = h.beta2 * v + (1.f - h.beta2) * g * g;
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), bc2_sqrt), h.eps);
  p -= __fdiv_rn(step_size * m, denom);
}

__global__ void __launch_bounds__(kThreads) adamw_update_kernel(const AdamWTensorList t, const AdamWHyper h) {
  // Which tensor and which chunk of it this block owns.
  int64_t block = blockIdx.x;
  int i = 0;
  for (; i < t.count; ++i) {
    const int64_t chunks = (t.numel[i] + kChunk - 1) / kChunk;
    if (block < chunks) break;
    block -= chunks;
  }
  if (i == t.count) return;
  const int64_t begin = block * kChunk;
  const int64_t end = min(begin + kChunk, t.numel[i]);

  // Bias corrections in double (fast-math leaves double alone): powf would be __powf, ~1e-6 off.
  const double step = *h.step;
  const float step_size = static_cast<float>(h.lr / (1.0 - pow(static_cast<double>(h.beta1), step)));
  const float bc2_sqrt = static_cast<float>(sqrt(1.0 - pow(static_cast<double>(h.beta2), step)));
  float* p = t.param[i];
  const float* g = t.grad[i];
  float* m = t.exp_avg[i];
  float* v = t.exp_avg_sq[i];
  auto* w16 = static_cast<__nv_bfloat16*>(t.param_bf16[i]);
  // Delayed FP8 scaling: the FP8 bytes of the copy, with the scale the weight's history holds.
  Fp8History* fh = w16 ? t.fp8_history[i] : nullptr;
  uint8_t* q8 = fh ? static_cast<uint8_t*>(t.param_fp8[i]) : nullptr;
  const float fs = fh ? fh->scale : 0.f;
  const auto ff = fh ? static_cast<Fp8Format>(fh->format) : Fp8Format::kE4M3;
  unsigned* amax = w16 ? (fh ? &fh->amax : t.amax_bits[i]) : nullptr;
  unsigned a = 0;  // max |copy| of this thread's elements, as abs_bits

  const bool aligned = ((reinterpret_cast<uintptr_t>(p) | reinterpret_cast<uintptr_t>(g) |
                         reinterpret_cast<uintptr_t>(m) | reinterpret_cast<uintptr_t>(v)) % 16 == 0) &&
                       (reinterpret_cast<uintptr_t>(w16) % 8 == 0) && (reinterpret_cast<uintptr_t>(q8) % 4 == 0) &&
                       begin % kVec == 0;
  int64_t e = begin + static_cast<int64_t>(threadIdx.x) * kVec;
  if (aligned) {
    for (; e + kVec <= end; e += kThreads * kVec) {
      float4 pp = *reinterpret_cast<const float4*>(p + e);
      const float4 gg = *reinterpret_cast<const float4*>(g + e);
      float4 mm = *reinterpret_cast<const float4*>(m + e);
      float4 vv = *reinterpret_cast<const float4*>(v + e);
      adamw_one(pp.x, gg.x, mm.x, vv.x, h, step_size, bc2_sqrt);
      adamw_one(pp.y, gg.y, mm.y, vv.y, h, step_size, bc2_sqrt);
      adamw_one(pp.z, gg.z, mm.z, vv.z, h, step_size, bc2_sqrt);
      adamw_one(pp.w, gg.w, mm.w, vv.w, h, step_size, bc2_sqrt);
      *reinterpret_cast<float4*>(p + e) = pp;
      *reinterpret_cast<float4*>(m + e) = mm;
      *reinterpret_cast<float4*>(v + e) = vv;
      if (w16) {
        __nv_bfloat162 lo = __floats2bfloat162_rn(pp.x, pp.y), hi = __floats2bfloat162_rn(pp.z, pp.w);
        uint2 packed;
        packed.x = *reinterpret_cast<unsigned*>(&lo);
        packed.y = *reinterpret_cast<unsigned*>(&hi);
        *reinterpret_cast<uint2*>(w16 + e) = packed;
        if (amax) {
          const float2 l = __bfloat1622float2(lo), u = __bfloat1622float2(hi);
          a = max(a, max(max(abs_bits(l.x), abs_bits(l.y)), max(abs_bits(u.x), abs_bits(u.y))));
          if (q8) {  // the copy as stored, times s: the bytes a cast of the copy with this scale writes
            const float c[4] = {l.x, l.y, u.x, u.y};
            fp8_tile::store_fp8<4>(q8 + e, c, fs, ff);
          }
        }
      }
    }
    // The vector loop stops at the last whole float4 of the chunk; the tail (numel % 4) goes below.
    e = begin + ((end - begin) / kVec) * kVec + threadIdx.x;
  } else {
    e = begin + threadIdx.x;
  }
  for (; e < end; e += kThreads) {
    float pp = p[e], mm = m[e], vv = v[e];
    adamw_one(pp, g[e], mm, vv, h, step_size, bc2_sqrt);
    p[e] = pp;
    m[e] = mm;
    v[e] = vv;
    if (w16) {
      w16[e] = __float2bfloat16_rn(pp);
      const float c = __bfloat162float(w16[e]);
      if (amax) a = max(a, abs_bits(c));
      if (q8) {
        const float c1[1] = {c};
        fp8_tile::store_fp8<1>(q8 + e, c1, fs, ff);
      }
    }
  }
  // A stored inf or NaN: the decode factor the weight is finished with turns NaN (fp8_history_params.h).
  if (fh && a >= 0x7f800000u) fh->inv_scale = __uint_as_float(0x7fc00000u);
  if (amax) {  // one atomic per warp: the max over the block is not worth a barrier here
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a = max(a, __shfl_xor_sync(0xffffffffu, a, o));
    if ((threadIdx.x & 31) == 0 && a) atomicMax(amax, a);
  }
}

__global__ void step_increment_kernel(float* step) { *step += 1.f; }

}  // namespace

void run_adamw_step_increment(float* step, void* stream) {
  step_increment_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(step);
  LMSCALE_CUDA_CHECK_LAUNCH("step_increment_kernel");
}

void run_adamw_update(const AdamWTensorList& t, const AdamWHyper& h, void* stream) {
  if (t.count < 0 || t.count > kAdamWTensorsPerLaunch)
    throw std::runtime_error("run_adamw_update: " + std::to_string(t.count) + " tensors, the limit per launch is " +
                             std::to_string(kAdamWTensorsPerLaunch));
  if (h.step == nullptr) throw std::runtime_error("run_adamw_update: the device step counter is null");
  int64_t blocks = 0;
  for (int i = 0; i < t.count; ++i) blocks += (t.numel[i] + kChunk - 1) / kChunk;
  if (blocks == 0) return;
  if (blocks > 0x7fffffff) throw std::runtime_error("run_adamw_update: too many elements for one launch");
  adamw_update_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(t, h);
  LMSCALE_CUDA_CHECK_LAUNCH("adamw_update_kernel");
}

}  // namespace lmscale::kernels
