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

// Empty when the Hopper backward can run `p` (the forward's conditions, plus dout TMA-describable).
std::string bwd_unsupported_reason(const FlashParams& p);

// Launches the Hopper backward's main kernel only: it reads p.dsum and adds into p.dq_accum, so the
// preprocess runs before it and the dQ conversion after (run_bwd_steps, flash_bwd_hopper_steps.cuh).
void run_bwd(const FlashParams& p, void* stream);

}  // namespace lmscale::kernels::hopper
