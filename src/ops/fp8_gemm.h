// The FP8 GEMM with per-tensor decode factors: cuBLASLt through at::_scaled_mm on CUDA (Hopper),
// the same product emulated in fp32 elsewhere (so the FP8 linear's math runs and is tested on CPU).
#pragma once
#include <ATen/core/Tensor.h>

#include <string>

namespace lmscale::ops {

// out (M, N) = (a · inv_a) · (b · inv_b) in out_dtype (bf16 or fp32), fp32 accumulation.
// a (M, K) row-major, b (K, N) column-major (bᵀ contiguous: the layout the H100's FP8 GEMM takes),
// FP8 (not both e5m2); inv_a, inv_b fp32 0-d (Fp8Tensor::inv_scale). fast_accum skips cuBLASLt's
// periodic promotion of partial sums to full fp32: faster, for the forward GEMM only (torchao and
// Transformer Engine do the same). The CPU emulation accumulates in fp32 throughout.
at::Tensor fp8_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& inv_a, const at::Tensor& inv_b,
                  at::ScalarType out_dtype, bool fast_accum);

// "" when `device` runs FP8 GEMMs (a CUDA device of compute capability 9.x with the lmscale kernels
// built), otherwise one sentence saying why not and what it supports instead.
std::string fp8_unsupported_reason(const at::Device& device);

}  // namespace lmscale::ops
