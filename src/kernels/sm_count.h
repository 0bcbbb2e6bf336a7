// The current CUDA device's SM count, which sizes grids (one block per SM, or a few per SM); asked of the runtime
// once per device and kept, since the launches that need it run on every step (240 FP8 casts a step at xl).
#pragma once
#include <cuda_runtime_api.h>

#include <atomic>

#include "kernels/cuda_check.h"

namespace lmscale::kernels {

inline int current_sm_count() {
  int dev = 0;
  LMSCALE_CUDA_CHECK(cudaGetDevice(&dev));
  static std::atomic<int> counts[64] = {};
  const bool kept = dev >= 0 && dev < 64;
  int sms = kept ? counts[dev].load(std::memory_order_relaxed) : 0;
  if (sms == 0) {
    LMSCALE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    if (kept) counts[dev].store(sms, std::memory_order_relaxed);
  }
  return sms;
}

}  // namespace lmscale::kernels
