// Causal multi-head self-attention with RoPE and a pluggable core: naive (matmul → mask → softmax →
// matmul, with NVTX ranges on each part), sdpa (torch's scaled_dot_product_attention, which picks
// cuDNN/flash/mem-efficient) or flash (lmscale's FlashAttention-2 op). Projections are bias-free.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "model/config.h"
#include "model/layers.h"

namespace lmscale {

// Plain attention on (B, H, T, D) tensors; the reference every faster core is compared with.
torch::Tensor naive_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal);

// Dispatches the attention core by backend; q, k, v are (B, H, T, D).
torch::Tensor attention_core(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                             AttentionBackend backend);

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const ModelConfig& cfg);
  // (B, T, C) → (B, T, C). FP8 (ops/fp8_amax.h): x_amax holds x's amax when its producer recorded it
  // (read by the packed QKV GEMM's cast); dy_amax is the slot for the amax of the output's gradient
  // (the output projection's dY), filled by its producer.
  torch::Tensor forward(const torch::Tensor& x, const ops::Fp8AmaxSlot& x_amax = {},
                        const ops::Fp8AmaxSlot& dy_amax = {});

  // Puts the q, k, v weights (and their bf16 copies, where attached) into one [3C, C] block each,
  // the three parameters becoming row blocks of it: names, shapes and values stay as docs/spec.md §1
  // says. Call after the module reached its device (Module::to allocates each parameter anew).
  // While the blocks stay adjacent, forward runs the projections as one GEMM.
  void pack_qkv();
  // Whether the q, k, v weights currently lie as row blocks of one [3C, C] tensor.
  bool qkv_packed() const;
  // The [3C, C] bf16 copy the packed projection reads (a view over the three copies), or undefined
  // unless the weights and their copies are packed.
  torch::Tensor packed_bf16_copy() const;

  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, output_proj{nullptr};
  RotaryEmbedding rope{nullptr};
  int64_t num_heads;
  AttentionBackend backend;
  // With packed q, k, v: split the GEMM output and apply RoPE in one kernel (ops/fused_rope.h)
  // instead of a split, upcasts, complex multiplies, downcasts and a copy of v.
  bool fused_rope = false;
};
TORCH_MODULE(CausalSelfAttention);

}  // namespace lmscale
