// The pre-norm decoder-only Transformer LM of docs/spec.md §1: embedding → L × Block → RMSNorm → LM
// head (untied). Block: h = x + Attn(RMSNorm(x)); out = h + SwiGLU(RMSNorm(h)). Also the loss.
// Knows nothing of distribution or timing.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <utility>
#include <vector>

#include "model/attention.h"
#include "model/config.h"
#include "model/layers.h"

namespace lmscale {

class TransformerBlockImpl : public torch::nn::Module {
 public:
  explicit TransformerBlockImpl(const ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) → (B, T, C)
  // The same block with each residual add fused into the RMSNorm that reads its sum: the input is
  // x + delta (delta undefined: x), the output (h, f) with h + f the block's output, the add left to
  // the next norm (the next block's ln1, or ln_final).
  std::pair<torch::Tensor, torch::Tensor> forward_fused_norms(const torch::Tensor& x, const torch::Tensor& delta);
  RMSNorm ln1{nullptr}, ln2{nullptr};
  CausalSelfAttention attn{nullptr};
  SwiGLU ffn{nullptr};
};
TORCH_MODULE(TransformerBlock);

class TransformerLMImpl : public torch::nn::Module {
 public:
  explicit TransformerLMImpl(const ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& tokens);  // (B, T) int64 → logits (B, T, V)
  // Every block's q, k, v weights as one [3C, C] GEMM operand (CausalSelfAttentionImpl::pack_qkv).
  void pack_qkv();
  // Every block's QKV split + RoPE as one kernel (CausalSelfAttentionImpl::fused_rope; needs pack_qkv).
  void use_fused_rope(bool on);
  // Every residual add fused with the RMSNorm after it (RMSNormImpl::add_forward, one kernel each
  // way on CUDA); the values are those of the plain forward.
  void use_fused_norms(bool on) { fused_norms = on; }
  // Every SwiGLU's silu(W1 x) ⊙ W3 x as one kernel each way (SwiGLUImpl::fused_gate).
  void use_fused_swiglu(bool on);
  // Gives every Linear a bf16 copy of its weight (LinearImpl::attach_bf16_copy; packed q, k, v copies
  // as one block when the weights are packed) and hands them over for the optimizer to keep current:
  // one tensor per entry of parameters(), in that order, undefined where the parameter has no copy.
  // Call once, after pack_qkv and before the first forward that should read the copies.
  std::vector<torch::Tensor> attach_bf16_copies();
  ModelConfig config;
  bool fused_norms = false;
  Embedding token_embeddings{nullptr};
  torch::nn::ModuleList layers;
  RMSNorm ln_final{nullptr};
  Linear lm_head{nullptr};
};
TORCH_MODULE(TransformerLM);

// Mean cross-entropy over all positions; logits (B, T, V) any float dtype, targets (B, T) int64.
// Computed in at least fp32 (log-softmax with max subtraction).
torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace lmscale
