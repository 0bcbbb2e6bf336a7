// The roll of the delayed-scaling histories at the end of a step; see fp8_history_params.h. One thread per
// operand (a few hundred per model): a single small node in the step's CUDA graph.
#include <cuda_runtime.h>

#include "kernels/cuda_check.h"
#include "kernels/fp8_history_params.h"

namespace lmscale::kernels {
namespace {

constexpr int kThreads = 128;

// ---------------------------------------------------------------------------------------------
// Kernels

__global__ void __launch_bounds__(kThreads) fp8_history_roll_kernel(Fp8History* h, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) fp8_history_roll(h[i]);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Launchers

void run_fp8_history_roll(Fp8History* h, int64_t n, void* stream) {
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  fp8_history_roll_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(h, n);
  LMSCALE_CUDA_CHECK_LAUNCH("fp8_history_roll_kernel");
}

}  // namespace lmscale::kernels
