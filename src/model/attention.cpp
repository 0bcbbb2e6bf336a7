// Multi-head self-attention with a pluggable core; see attention.h.
#include "model/attention.h"

#include <torch/torch.h>

#include <cmath>

#include "core/autocast.h"
#include "core/nvtx.h"
#include "ops/flash_attention.h"

namespace lmscale {

torch::Tensor naive_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  torch::Tensor scores;
  {
    ScopedRange r("attention/scores");
    scores = torch::matmul(q, k.transpose(-2, -1)) * scale;  // (B, H, Tq, Tk)
    if (causal) {
      const int64_t Tq = q.size(-2), Tk = k.size(-2);
      // Query i sees keys j <= i (bottom-right aligned when Tq == Tk).
      auto mask = torch::ones({Tq, Tk}, torch::TensorOptions().dtype(torch::kBool).device(q.device())).triu(1);
      scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
    }
  }
  torch::Tensor probs;
  {
    ScopedRange r("attention/softmax");
    // The kernel works in fp32 whatever the scores' dtype. Under autocast, torch::softmax would cast
    // the bf16 scores up and the probabilities back down for the value matmul: two more kernels
    // forward and two backward, for the same forward result (fp32 math, rounded once to bf16).
    probs = at::_softmax(scores, -1, /*half_to_float=*/false);
  }
  ScopedRange r("attention/value");
  return torch::matmul(probs.to(v.scalar_type()), v);
}

torch::Tensor attention_core(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                             AttentionBackend backend) {
  switch (backend) {
    case AttentionBackend::Naive: return naive_attention(q, k, v, causal);
    case AttentionBackend::Sdpa: return at::scaled_dot_product_attention(q, k, v, {}, 0.0, causal);
    case AttentionBackend::Flash:
      // Autocast does not know the lmscale op: give it one dtype, as the projections produced.
      return ops::flash_attention(cast_for_autocast(q), cast_for_autocast(k), cast_for_autocast(v), causal);
  }
  TORCH_INTERNAL_ASSERT(false, "unhandled attention backend");
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const ModelConfig& cfg)
    : num_heads(cfg.num_heads), backend(cfg.attention) {
  q_proj = register_module("q_proj", Linear(cfg.d_model, cfg.d_model));
  k_proj = register_module("k_proj", Linear(cfg.d_model, cfg.d_model));
  v_proj = register_module("v_proj", Linear(cfg.d_model, cfg.d_model));
  output_proj = register_module("output_proj", Linear(cfg.d_model, cfg.d_model));
  rope = register_module("rope", RotaryEmbedding(cfg.rope_theta, cfg.d_head(), cfg.context_length));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  ScopedRange range("attention");
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), H = num_heads, D = C / H;
  // (B, T, C) → (B, T, H, D) → (B, H, T, D): heads split from the last dim.
  auto split = [&](const torch::Tensor& t) { return t.view({B, T, H, D}).transpose(1, 2); };
  auto xc = cast_for_autocast(x);  // once for the three projections
  auto q = rope(split(q_proj(xc)));
  auto k = rope(split(k_proj(xc)));
  auto v = split(v_proj(xc));
  auto o = attention_core(q, k, v, /*causal=*/true, backend);  // (B, H, T, D)
  return output_proj(o.transpose(1, 2).reshape({B, T, C}));
}

}  // namespace lmscale
