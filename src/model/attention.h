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
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) → (B, T, C)

  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, output_proj{nullptr};
  RotaryEmbedding rope{nullptr};
  int64_t num_heads;
  AttentionBackend backend;
};
TORCH_MODULE(CausalSelfAttention);

}  // namespace lmscale
