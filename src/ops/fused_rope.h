// The bridge to the fused QKV-split + RoPE kernels (src/kernels/fused_rope.cu) and their reference.
// Input: the one QKV GEMM's output (B, T, 3C), columns [q | k | v]; output: q and k rotated by RoPE
// (interleaved pairs, the fp32 (cos, sin) table of RotaryEmbedding), and v, each (B, H, T, D).
#pragma once
#include <ATen/core/Tensor.h>

#include <tuple>

#include "ops/fp8_amax.h"

namespace lmscale::ops {

// Throws, naming the problem, unless qkv is (B, T, 3C) with C = heads × an even D and rotation covers
// (≥T, D/2, 2). Shared with the torch.ops.lmscale.rope_qkv_* ops (fused_library.cpp).
void check_rope_qkv_shapes(const at::Tensor& qkv, const at::Tensor& rotation, int64_t heads);

// Whether rope_qkv runs the CUDA kernel for this input (CUDA, bf16 or fp32, last dim contiguous,
// kernels built); otherwise it runs rope_qkv_reference.
bool rope_qkv_uses_kernel(const at::Tensor& qkv);

// Differentiable. rotation: (≥T, D/2, 2) fp32 (cos, sin). Outputs contiguous (B, H, T, D), qkv's dtype.
// Given dqkv_amax (ops/fp8_amax.h), the backward records the amax of qkv's gradient as it writes it
// (the dY of the FP8 QKV GEMM); the CPU path keeps the same contract with ATen ops.
std::tuple<at::Tensor, at::Tensor, at::Tensor> rope_qkv(const at::Tensor& qkv, const at::Tensor& rotation,
                                                        int64_t heads, const Fp8AmaxSlot& dqkv_amax = {});

// The same with ATen ops (any device and float dtype; the rotation in at least fp32): the CPU path
// and the tests' oracle (run in fp64).
std::tuple<at::Tensor, at::Tensor, at::Tensor> rope_qkv_reference(const at::Tensor& qkv, const at::Tensor& rotation,
                                                                  int64_t heads);

}  // namespace lmscale::ops
