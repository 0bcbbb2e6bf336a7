// CUDA error checking for src/kernels/: every runtime call and launch goes through these macros, which
// throw std::runtime_error naming file, line and the failing call or kernel. Never exit(): lmscale is a
// library, and ops/ turns the exception into a Python/C++ error the caller can catch.
#pragma once
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace lmscale::kernels {
[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what + " failed: " +
                           cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

// The kernels put sequence tiles on grid.y, whose limit is 65535 (batch*heads go on x, limit 2^31 - 1).
inline void check_grid_y(int seq_blocks, const char* kernel) {
  if (seq_blocks > 65535)
    throw std::runtime_error(std::string(kernel) + ": the sequence needs " + std::to_string(seq_blocks) +
                             " tiles, over the grid's y limit 65535; split the sequence");
}
}  // namespace lmscale::kernels

#define LMSCALE_CUDA_CHECK(expr)                                                             \
  do {                                                                                       \
    cudaError_t lmscale_err_ = (expr);                                                       \
    if (lmscale_err_ != cudaSuccess)                                                         \
      ::lmscale::kernels::throw_cuda_error(lmscale_err_, #expr, __FILE__, __LINE__);         \
  } while (0)

// After a <<<...>>> launch: catches bad configurations (too much shared memory, grid too large).
#define LMSCALE_CUDA_CHECK_LAUNCH(kernel_name)                                               \
  do {                                                                                       \
    cudaError_t lmscale_err_ = cudaGetLastError();                                           \
    if (lmscale_err_ != cudaSuccess)                                                         \
      ::lmscale::kernels::throw_cuda_error(lmscale_err_, "launch of " kernel_name, __FILE__, __LINE__); \
  } while (0)
