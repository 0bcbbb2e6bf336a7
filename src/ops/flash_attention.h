// FlashAttention-2 ops (docs/spec.md §3). Dense layout: q (..., Hq, Nq, D), k and v (..., Hkv, Nk, D) with
// any number of leading batch dims, dim -3 being the heads (2-D inputs have none); Hq a multiple of Hkv
// (grouped-query and multi-query attention: query head h reads K/V head h / (Hq / Hkv)). O has q's shape
// and dtype, L (logsumexp) is fp32 of shape (..., Hq, Nq) (fp64 for fp64 inputs, which only the reference
// serves). Packed variable-length layout (the *_varlen ops): q (total_q, Hq, D), k and v (total_k, Hkv, D),
// int32 cu_seqlens; L (Hq, total_q). The mask (causal, its alignment, a sliding window: FlashMask,
// flash_reference.h, docs/spec.md §3.6) and the scale are arguments of every op. Outputs are contiguous.
//
// CPU tensors run the tiled ATen reference (flash_reference.h), every mask and layout. CUDA tensors run
// src/kernels/: bf16/fp16 on tensor cores, fp32 on the fp32 SIMT kernels (fp32 math throughout, no TF32);
// fp64 CUDA inputs run the reference. The kernels take every mask, grouped K/V heads (by index, dK and dV summed
// over the group inside the backward) and packed batches themselves (kernels/flash_params.h).
//
// Registered as torch.ops.lmscale.flash_attention_{forward,backward}, flash_attention (O only, with C++
// autograd: flash_attention below) and flash_attention_varlen_{forward,backward} (CPU, CUDA); the fake
// kernels and the forward ops' autograd formulas are registered by the Python package
// (python/lmscale/attention.py).
#pragma once
#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <tuple>

#include "ops/flash_reference.h"

namespace lmscale::ops {

// Low-level forward: returns (O, L). No autograd. scale: the scores' factor, default 1/sqrt(D).
std::tuple<at::Tensor, at::Tensor> flash_attention_forward(const at::Tensor& q, const at::Tensor& k,
                                                          const at::Tensor& v, const FlashMask& mask,
                                                          std::optional<double> scale = std::nullopt);

// Low-level backward by recomputation: returns (dQ, dK, dV) in the input dtype, dK and dV with k's and v's
// head count. deterministic: dQ bitwise reproducible (throws where the kernel path cannot give it: the
// mma.sync backward; torch.use_deterministic_algorithms(True) asks the same through PyTorch's alert).
std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o, const at::Tensor& L,
    const at::Tensor& dout, const FlashMask& mask, std::optional<double> scale = std::nullopt,
    bool deterministic = false);

// Autograd-aware: returns O and saves exactly q, k, v, O, L for backward.
at::Tensor flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const FlashMask& mask,
                           std::optional<double> scale = std::nullopt, bool deterministic = false);

// The original signatures: no mask or causal (SDPA's top-left alignment), the default scale.
std::tuple<at::Tensor, at::Tensor> flash_attention_forward(const at::Tensor& q, const at::Tensor& k,
                                                          const at::Tensor& v, bool is_causal);
std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward(const at::Tensor& q, const at::Tensor& k,
                                                                        const at::Tensor& v, const at::Tensor& o,
                                                                        const at::Tensor& L, const at::Tensor& dout,
                                                                        bool is_causal);
at::Tensor flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool is_causal);

// Packed variable-length batches, FlashAttention's flash_attn_varlen_func layout: q (total_q, Hq, D), k and v
// (total_k, Hkv, D); sequence b is rows [cu_seqlens_q[b], cu_seqlens_q[b+1]) of q and [cu_seqlens_k[b],
// cu_seqlens_k[b+1]) of k and v (int32 (B + 1,) on q's device, from 0, non-decreasing, the last at most the
// total: rows past it belong to no sequence and get O = 0), no sequence longer than max_seqlen_q / _k.
// Attention stays inside each sequence; the mask applies to each with its own lengths. Returns (O like q,
// L (Hq, total_q)). CUDA runs the kernels (fp64 on CUDA: the reference). CPU checks the offsets' values; CUDA keeps
// them on the device (no synchronisation), so there they must be valid, as flash-attn's.
std::tuple<at::Tensor, at::Tensor> flash_attention_varlen_forward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cu_seqlens_q,
    const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k, const FlashMask& mask = {},
    std::optional<double> scale = std::nullopt);

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_varlen_backward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o, const at::Tensor& L,
    const at::Tensor& dout, const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q,
    int64_t max_seqlen_k, const FlashMask& mask = {}, std::optional<double> scale = std::nullopt,
    bool deterministic = false);

// Autograd-aware varlen: returns O, saves q, k, v, O, L and the offsets.
at::Tensor flash_attention_varlen(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q,
                                  int64_t max_seqlen_k, const FlashMask& mask = {},
                                  std::optional<double> scale = std::nullopt, bool deterministic = false);

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
