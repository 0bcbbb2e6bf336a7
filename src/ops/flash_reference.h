// The tiled FlashAttention-2 reference in plain ATen (docs/spec.md §3): the CPU path of the lmscale ops and
// the numerical reference the CUDA kernels are tested against. Runs on any device; any number of
// leading batch/head dims; fp16/bf16/fp32 compute in fp32, fp64 stays fp64. Inputs are assumed valid
// (flash_attention.cpp checks them).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <tuple>

namespace lmscale::ops {

// Query and key tile size of the reference; small enough that CPU tests with odd lengths cross tiles.
constexpr int64_t kReferenceTile = 64;

// q (..., Nq, D), k and v (..., Nk, D) -> (O like q, L (..., Nq) fp32, or fp64 for fp64 inputs).
// P is rounded to v's dtype before P V, as the kernels do.
std::tuple<at::Tensor, at::Tensor> flash_reference_forward(const at::Tensor& q, const at::Tensor& k,
                                                           const at::Tensor& v, bool is_causal,
                                                           int64_t tile = kReferenceTile);

// Backward by recomputation from L: D = rowsum(dO ⊙ O), P = exp(S - L), dV = P^T dO, dP = dO V^T,
// dS = P ⊙ (dP - D), dQ = dS K * scale, dK = dS^T Q * scale. Returns (dQ, dK, dV) in the input dtype.
std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_reference_backward(const at::Tensor& q, const at::Tensor& k,
                                                                        const at::Tensor& v, const at::Tensor& o,
                                                                        const at::Tensor& L, const at::Tensor& dout,
                                                                        bool is_causal,
                                                                        int64_t tile = kReferenceTile);

}  // namespace lmscale::ops
