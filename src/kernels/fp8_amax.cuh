// Device helpers for the kernels that take the amax of an FP8 operand while they write it (saving a pass:
// RMSNorm, SwiGLU and RoPE, forward or backward): one stored value's contribution, the block's max
// folded into the tensor's amax, and the slot zeroed before the launch. The same amax as
// fp8_amax_kernel's pass over the stored tensor (fp8_cast.cu), bit for bit. Header-only, no ATen.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_check.h"
#include "kernels/fp8_scale.h"
#include "kernels/fused_elementwise.cuh"

namespace lmscale::kernels {

// |v| as fp8_amax_kernel counts it in the tensor of T that v is stored in: rounded to T and read back
// (NaN keeps its payload, −0 counts as 0), as float bits (abs_bits: a max over them keeps NaN).
template <typename T>
__device__ __forceinline__ uint32_t stored_abs_bits(float v) {
  return abs_bits(fused::rounded<T>(v));
}

// max over the block of each thread's m, then one atomicMax into *amax (none when 0, as in
// fp8_amax_kernel). Every thread of the block calls it; blockDim.x a multiple of 32. The max is
// order-independent, so the result does not depend on how the tensor was split among blocks.
__device__ __forceinline__ void block_amax_commit(uint32_t m, uint32_t* amax) {
  __shared__ uint32_t warps[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
  __syncthreads();  // warps[] may be read by a previous call of this block
  if (lane == 0) warps[warp] = m;
  __syncthreads();
  if (warp == 0) {
    m = lane < static_cast<int>(blockDim.x >> 5) ? warps[lane] : 0u;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0 && m) atomicMax(amax, m);
  }
}

// Host side: the slot zeroed on `stream` before the kernel that maxes into it (a memset node, as
// run_fp8_amax does; captured in the step's CUDA graph, no host sync). Null: no amax asked for.
inline void zero_amax(uint32_t* amax, cudaStream_t stream) {
  if (amax) LMSCALE_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(uint32_t), stream));
}

}  // namespace lmscale::kernels
