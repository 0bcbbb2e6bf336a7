// The sm_90a FlashAttention path (src/kernels/hopper/): who can use it and how to launch it. Plain C++
// (no CUDA headers) like flash_params.h; flash_api.cu calls it from run_flash_fwd when it applies.
#pragma once
#include <string>

#include "kernels/flash_params.h"

namespace lmscale::kernels::hopper {

// Empty when the Hopper forward can run `p` on the current device; otherwise why not (device is not
// sm_90, dtype or head dim not built for it, strides TMA cannot describe), for the forced path's error.
std::string fwd_unsupported_reason(const FlashParams& p);

// Launches the Hopper forward on `stream` (a cudaStream_t); throws std::runtime_error on CUDA errors.
void run_fwd(const FlashParams& p, void* stream);

}  // namespace lmscale::kernels::hopper
