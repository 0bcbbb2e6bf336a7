// The one bridge to the fused QKV-split + RoPE kernels (src/kernels/fused_rope.cu) and their ATen
// reference, for the C++ model (rope_qkv, differentiable) and torch.ops.lmscale.rope_qkv_{forward,
// backward} (fused_library.cpp). Input: the one QKV GEMM's output (B, T, 3C), columns [q | k | v];
// output: q and k rotated by RoPE (the fp32 (cos, sin) table of RotaryEmbedding), and v, each (B, H, T, D).
#pragma once
#include <ATen/core/Tensor.h>

#include <tuple>

#include "ops/fp8_amax.h"

namespace lmscale::ops {

// Whether rope_qkv_forward/backward run the CUDA kernels for this input (CUDA, bf16 or fp32, an fp32
// rotation on the same device, the adjacent layout, kernels built); otherwise they run the reference
// (fp32 math, fp64 for fp64 inputs).
bool rope_qkv_uses_kernel(const at::Tensor& qkv, const at::Tensor& rotation);

// qkv (B, T, 3C) = [q | k | v] → q, k rotated by the (cos, sin) of rotation (≥T, D/2, 2) fp32, v as is,
// each (B, H, T, D) contiguous, qkv's dtype. Pair i of a head is (2i, 2i+1) (adjacent: the spec's,
// GPT-J's) or, with rotate_half, (i, i + D/2) (Hugging Face's Llama and GPT-NeoX: q·cos +
// rotate_half(q)·sin). The kernel serves the adjacent layout; rotate_half runs the reference on every device.
std::tuple<at::Tensor, at::Tensor, at::Tensor> rope_qkv_forward(const at::Tensor& qkv, const at::Tensor& rotation,
                                                                int64_t heads, bool rotate_half = false);

// The transpose: dq, dk (B, H, T, D) rotated back (x0 = y0·cos + y1·sin, x1 = −y0·sin + y1·cos), dv as is,
// into dqkv (B, T, 3C). Given dqkv_amax (ops/fp8_amax.h), dqkv's amax is recorded there as it is written
// (the dY of the FP8 QKV GEMM); under delayed scaling the kernel writes that GEMM's FP8 operand instead
// (dqkv is then handed on unwritten).
at::Tensor rope_qkv_backward(const at::Tensor& dq, const at::Tensor& dk, const at::Tensor& dv,
                             const at::Tensor& rotation, int64_t heads, bool rotate_half = false,
                             const Fp8AmaxSlot& dqkv_amax = {});

// Differentiable in qkv (the C++ model, adjacent layout): rope_qkv_forward, with rope_qkv_backward as its
// gradient.
std::tuple<at::Tensor, at::Tensor, at::Tensor> rope_qkv(const at::Tensor& qkv, const at::Tensor& rotation,
                                                        int64_t heads, const Fp8AmaxSlot& dqkv_amax = {});

}  // namespace lmscale::ops
