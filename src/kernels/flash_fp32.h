// The fp32 FlashAttention-2 path (flash_fp32_fwd.cu, flash_fp32_bwd.cu): what flash_api.cu calls when
// FlashParams::dtype is FlashDtype::kFP32. Plain fp32 SIMT math (FFMA, no TF32, no tensor cores), so
// fp32 inputs get fp32-class results; speed comes second (docs/flash_notes.md, "fp32 path").
#pragma once
#include "kernels/flash_params.h"

namespace lmscale::kernels {

// Whether the fp32 kernels serve head_dim: every head dim of FlashHeadDims (flash_head_dims.h), whatever
// LMSCALE_FA_HEADDIMS says (they are small and quick to compile).
bool flash_fp32_supported(int head_dim);

// Same contract as run_flash_fwd / run_flash_bwd (flash_params.h) for fp32 tensors. The backward
// writes dsum (the caller's workspace) and does not use dq_accum.
void run_flash_fp32_fwd(const FlashParams& params, void* stream);
void run_flash_fp32_bwd(const FlashParams& params, void* stream);

}  // namespace lmscale::kernels
