// The pre-norm decoder-only Transformer LM of docs/spec.md §1: embedding → L × Block → RMSNorm → LM
// head (untied). Block: h = x + Attn(RMSNorm(x)); out = h + SwiGLU(RMSNorm(h)). Also the loss.
// Knows nothing of distribution or timing.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include "model/attention.h"
#include "model/config.h"
#include "model/layers.h"

namespace lmscale {

class TransformerBlockImpl : public torch::nn::Module {
 public:
  explicit TransformerBlockImpl(const ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) → (B, T, C)
  RMSNorm ln1{nullptr}, ln2{nullptr};
  CausalSelfAttention attn{nullptr};
  SwiGLU ffn{nullptr};
};
TORCH_MODULE(TransformerBlock);

class TransformerLMImpl : public torch::nn::Module {
 public:
  explicit TransformerLMImpl(const ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& tokens);  // (B, T) int64 → logits (B, T, V)
  ModelConfig config;
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
