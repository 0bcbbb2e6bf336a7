// The boundary between ops/ and the multi-tensor AdamW kernel: plain structs of pointers and sizes,
// no ATen, no CUDA headers. One launch updates up to kAdamWTensorsPerLaunch fp32 parameters (and
// their two moment buffers) in place and, where asked, writes each updated weight's bf16 copy: the
// copy the next forward's matmuls read under bf16 autocast instead of re-casting the fp32 weight.
#pragma once
#include <cstdint>

#include "kernels/fp8_history_params.h"

namespace lmscale::kernels {

// Enough tensors per launch that a GPT-size model needs a handful of launches, few enough that the
// argument struct stays far below the 4 KiB kernel-parameter limit (about 2.7 KiB).
constexpr int kAdamWTensorsPerLaunch = 32;

struct AdamWTensorList {
  int count = 0;                                  // tensors used in this launch, ≤ kAdamWTensorsPerLaunch
  float* param[kAdamWTensorsPerLaunch] = {};      // fp32, contiguous, updated in place
  const float* grad[kAdamWTensorsPerLaunch] = {};  // fp32, contiguous, same numel
  float* exp_avg[kAdamWTensorsPerLaunch] = {};     // first moment m
  float* exp_avg_sq[kAdamWTensorsPerLaunch] = {};  // second moment v
  void* param_bf16[kAdamWTensorsPerLaunch] = {};  // __nv_bfloat16 copy of the updated param, or null
  // With a bf16 copy: atomic max of |copy| into *amax_bits (the bits of a non-negative float as an
  // unsigned int, kernels/fp8_scale.h), or null. The FP8 weights' scale, taken in the same pass.
  unsigned* amax_bits[kAdamWTensorsPerLaunch] = {};
  // With a bf16 copy, under delayed FP8 scaling (fp8_history_params.h): the updated weight's FP8 bytes
  // (fp8(copy·s), s the history's scale, saturating; numel bytes, the param's rows of the row-major
  // FP8 weight), and max |copy| into fp8_history[k]->amax instead of amax_bits (a stored inf or NaN sets
  // its inv_scale to NaN). Null: none.
  Fp8History* fp8_history[kAdamWTensorsPerLaunch] = {};
  void* param_fp8[kAdamWTensorsPerLaunch] = {};
  int64_t numel[kAdamWTensorsPerLaunch] = {};
};

struct AdamWHyper {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.01f;
  // Step counter on the device (fp32, as torch's capturable AdamW keeps it), so a replayed CUDA graph
  // sees it advance. run_adamw_step_increment adds 1; run_adamw_update reads it (already advanced).
  float* step = nullptr;
};

// torch.optim.AdamW, per element, fp32 math (decoupled decay, bias correction; docs/spec.md §1):
//   p ← p·(1 − lr·wd);  m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
//   p ← p − (lr / (1 − β1ᵗ)) · m / (√v / √(1 − β2ᵗ) + eps)
// Launch on `stream` (a cudaStream_t as void*). Throw std::runtime_error on a CUDA error.
void run_adamw_step_increment(float* step, void* stream);
void run_adamw_update(const AdamWTensorList& tensors, const AdamWHyper& hyper, void* stream);

}  // namespace lmscale::kernels
