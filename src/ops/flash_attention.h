// FlashAttention-2 ops (docs/spec.md §3). Layout: q (..., Nq, D), k and v (..., Nk, D) with any number
// of leading batch/head dims; O has q's shape and dtype, L (logsumexp) is fp32 of shape (..., Nq)
// (fp64 for fp64 inputs, which only the reference serves). Causal requires Nq == Nk (query i sees keys
// j <= i). CPU tensors run the tiled ATen reference (flash_reference.h); CUDA tensors run src/kernels/:
// bf16/fp16 on tensor cores, fp32 on the fp32 SIMT kernels (flash_fp32_*.cu: fp32 math throughout, no
// TF32, no bf16 rounding); fp64 CUDA inputs run the reference. Outputs are always contiguous.
// Registered as torch.ops.lmscale.flash_attention_{forward,backward} (CPU, CUDA) and
// torch.ops.lmscale.flash_attention (CPU, CUDA, and Autograd: flash_attention below); the fake kernels
// and the forward op's autograd formula are registered by the Python package (python/lmscale/attention.py).
#pragma once
#include <ATen/core/Tensor.h>

#include <tuple>

namespace lmscale::ops {

// Low-level forward: returns (O, L). No autograd.
std::tuple<at::Tensor, at::Tensor> flash_attention_forward(const at::Tensor& q, const at::Tensor& k,
                                                          const at::Tensor& v, bool is_causal);

// Low-level backward by recomputation: returns (dQ, dK, dV) in the input dtype.
std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward(const at::Tensor& q, const at::Tensor& k,
                                                                        const at::Tensor& v, const at::Tensor& o,
                                                                        const at::Tensor& L, const at::Tensor& dout,
                                                                        bool is_causal);

// Autograd-aware: returns O and saves exactly q, k, v, O, L for backward.
at::Tensor flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool is_causal);

// Whether this build's CUDA kernels serve (dtype, head_dim) (bf16, fp16 or fp32);
// false in CPU-only builds. Tests and benchmarks use it to skip what was not compiled.
bool flash_kernel_available(at::ScalarType dtype, int64_t head_dim);

// The kernel path of bf16/fp16 CUDA calls for the whole process (kernels::FlashPath, the one switch):
// "auto" (the default: the sm_90a kernels wherever they can run, forward and backward, else mma.sync),
// "hopper" or "mma-sync" (forced, to compare the two; "hopper" throws where it cannot run). The backward of
// a flash_attention call runs the path its forward ran. Returns the previous setting. Throws without CUDA
// kernels in the build.
std::string set_flash_path(const std::string& path);

}  // namespace lmscale::ops
