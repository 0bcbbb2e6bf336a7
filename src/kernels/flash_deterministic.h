// Whether a FlashAttention backward can give bitwise-reproducible dQ (torch.use_deterministic_algorithms),
// for ops/ to decide between passing FlashParams::dq_semaphore and PyTorch's not-deterministic alert.
// Plain C++ like flash_params.h; implemented in flash_api.cu beside the dispatch it mirrors.
#pragma once
#include "kernels/flash_params.h"

namespace lmscale::kernels {

// True when run_flash_bwd(p) would take a kernel family whose dQ can be made reproducible: the fp32
// kernels (two passes, no atomics: always) and the Hopper backward (with p.dq_semaphore, Note
// [deterministic dQ]); false for the mma.sync backward, which adds dQ with atomics.
bool flash_bwd_can_be_deterministic(const FlashParams& p);

}  // namespace lmscale::kernels
