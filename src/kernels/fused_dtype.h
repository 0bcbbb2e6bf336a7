// The element types the fused memory-bound kernels (RMSNorm + residual, SwiGLU, cross-entropy)
// read and write; their math is fp32 whatever the storage. Plain enum, no CUDA headers.
#pragma once

namespace lmscale::kernels {

enum class FusedDtype { kBF16 = 0, kFP32 = 1 };

}  // namespace lmscale::kernels
