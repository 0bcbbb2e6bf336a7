// The FP8 casts' amax from the kernels that write their operands (Fp8Layers::producer_amax, ops/fp8_amax.h)
// on the CPU, where those kernels are ATen ops with the same contract: a small TransformerLM on the fused
// path (packed QKV + RoPE, residual adds in the norms, the SwiGLU gate) in FP8 gives the same logits and
// every gradient bit for bit with the producers' amax and with a pass per cast, and the producers spare
// every cast's own amax pass but the attention output's.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "core/autocast.h"
#include "model/transformer.h"
#include "ops/fp8_quantize.h"

namespace lmscale {
namespace {

struct Outcome {
  torch::Tensor logits;
  std::vector<torch::Tensor> grads;
  int64_t casts_with_own_amax = 0;
};

ModelConfig config() {
  auto c = model_config("tiny");
  c.d_model = 64;
  c.num_heads = 4;
  c.d_ff = 96;
  c.num_layers = 2;
  c.vocab_size = 128;
  c.context_length = 16;
  c.attention = AttentionBackend::Naive;
  return c;
}

Outcome forward_backward(bool producer_amax) {
  torch::manual_seed(11);
  TransformerLM model(config());
  model->pack_qkv();
  model->use_fused_rope(true);
  model->use_fused_norms(true);
  model->use_fused_swiglu(true);
  Fp8Layers f;
  f.min_dim = 0;
  f.producer_amax = producer_amax;
  model->use_fp8(f);
  auto tokens = torch::randint(128, {2, 16}, torch::kLong), targets = torch::randint(128, {2, 16}, torch::kLong);
  {
    torch::NoGradGuard no_grad;  // an outlier channel, so that every tensor's amax is not alike
    model->token_embeddings->weight.select(1, 5).mul_(30);
  }
  Outcome r;
  const int64_t before = ops::fp8_casts_with_own_amax();
  {
    AutocastScope autocast(torch::kCPU, torch::kFloat8_e4m3fn);
    r.logits = model(tokens);
    cross_entropy(r.logits, targets).backward();
  }
  r.casts_with_own_amax = ops::fp8_casts_with_own_amax() - before;
  for (const auto& p : model->parameters()) r.grads.push_back(p.grad());
  return r;
}

TEST(Fp8ProducerAmax, StepIsBitIdenticalAndSparesTheAmaxPasses) {
  const Outcome fused = forward_backward(true), separate = forward_backward(false);
  EXPECT_TRUE(torch::equal(fused.logits, separate.logits));
  ASSERT_EQ(fused.grads.size(), separate.grads.size());
  for (size_t i = 0; i < fused.grads.size(); ++i) {
    ASSERT_TRUE(fused.grads[i].defined()) << "parameter " << i;
    EXPECT_TRUE(torch::equal(fused.grads[i], separate.grads[i])) << "gradient of parameter " << i;
  }
  // Per block, casts with an amax pass of their own (no cached FP8 weights here: each forward also casts
  // the 5 weight operands, packed QKV, out, W1, W3, W2). Separate: activations QKV, out, W1+W3 (shared),
  // W2 and dY of all five GEMMs: 9. With the producers' amax only the attention output's remains.
  const int64_t L = config().num_layers;
  EXPECT_EQ(separate.casts_with_own_amax, (5 + 9) * L);
  EXPECT_EQ(fused.casts_with_own_amax, (5 + 1) * L);
}

}  // namespace
}  // namespace lmscale
