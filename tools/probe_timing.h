// CUDA-event timing shared by the standalone kernel probes (tools/flash_probe.cu,
// tools/flash_hopper_probe.cu): the median of `iters` timed calls after `warmup` untimed ones, each call synchronised;
// or the mean of `iters` calls queued back to back (queued_ms), as a training loop and the product's benchmarks run
// them (the GPU never idles between calls, so its clocks are the sustained ones).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda_check.h"

template <typename F>
float median_ms(F&& f, int iters, int warmup = 2) {
  cudaEvent_t a, z;
  LMSCALE_CUDA_CHECK(cudaEventCreate(&a));
  LMSCALE_CUDA_CHECK(cudaEventCreate(&z));
  std::vector<float> ms;
  for (int i = 0; i < warmup + iters; ++i) {
    LMSCALE_CUDA_CHECK(cudaEventRecord(a));
    f();
    LMSCALE_CUDA_CHECK(cudaEventRecord(z));
    LMSCALE_CUDA_CHECK(cudaEventSynchronize(z));
    float t;
    LMSCALE_CUDA_CHECK(cudaEventElapsedTime(&t, a, z));
    if (i >= warmup) ms.push_back(t);
  }
  LMSCALE_CUDA_CHECK(cudaEventDestroy(a));
  LMSCALE_CUDA_CHECK(cudaEventDestroy(z));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

template <typename F>
float queued_ms(F&& f, int iters, int warmup = 2) {
  for (int i = 0; i < warmup; ++i) f();
  cudaEvent_t a, z;
  LMSCALE_CUDA_CHECK(cudaEventCreate(&a));
  LMSCALE_CUDA_CHECK(cudaEventCreate(&z));
  LMSCALE_CUDA_CHECK(cudaEventRecord(a));
  for (int i = 0; i < iters; ++i) f();
  LMSCALE_CUDA_CHECK(cudaEventRecord(z));
  LMSCALE_CUDA_CHECK(cudaEventSynchronize(z));
  float t;
  LMSCALE_CUDA_CHECK(cudaEventElapsedTime(&t, a, z));
  LMSCALE_CUDA_CHECK(cudaEventDestroy(a));
  LMSCALE_CUDA_CHECK(cudaEventDestroy(z));
  return t / iters;
}
