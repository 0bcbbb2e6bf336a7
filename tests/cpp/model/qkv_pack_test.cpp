// Q, K, V projections as one GEMM (CausalSelfAttentionImpl::pack_qkv): the parameters keep their
// names, shapes and values, become row blocks of one [3C, C] tensor, and the model computes the same
// loss and gradients as with three GEMMs. fp32 on the CPU: within 1e-5 relative (only the GEMM's
// blocking changes); bf16 autocast with bf16 copies: within 2e-2 of each gradient's max.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/autocast.h"
#include "model/transformer.h"

namespace lmscale {
namespace {

ModelConfig odd_config() {
  ModelConfig c = model_config("tiny");
  c.d_model = 40;  // head dim 10, d not a multiple of 128 (nor of 16)
  c.num_heads = 4;
  c.d_ff = 72;
  c.vocab_size = 97;
  c.context_length = 16;
  return c;
}

struct Run {
  torch::Tensor loss;
  std::map<std::string, torch::Tensor> grads;
};

Run run(TransformerLM& model, const torch::Tensor& tokens, const torch::Tensor& targets, bool bf16) {
  model->zero_grad();
  torch::Tensor loss;
  {
    AutocastScope autocast(torch::kCPU, bf16 ? torch::kBFloat16 : torch::kFloat);
    loss = cross_entropy(model(tokens), targets);
  }
  loss.backward();
  Run r{loss.detach()};
  for (const auto& p : model->named_parameters()) r.grads[p.key()] = p.value().grad().clone();
  return r;
}

double max_rel(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-12, b.abs().max().item<double>());
}

}  // namespace

TEST(QkvPack, KeepsParametersAndMatchesThreeGemms) {
  for (int variant = 0; variant < 3; ++variant) {
    const bool bf16 = variant >= 1, fused_rope = variant == 2;  // fused_rope: the op's CPU reference
    torch::manual_seed(31);
    TransformerLM plain(odd_config());
    torch::manual_seed(31);
    TransformerLM packed(odd_config());
    std::vector<void*> before;
    for (const auto& p : packed->parameters()) before.push_back(p.unsafeGetTensorImpl());
    if (bf16)
      for (auto& m : packed->modules(false))
        if (auto* lin = m->as<LinearImpl>()) lin->attach_bf16_copy();
    packed->pack_qkv();
    packed->use_fused_rope(fused_rope);
    auto* attn = packed->layers[0]->as<TransformerBlock>()->attn.get();
    ASSERT_TRUE(attn->qkv_packed());
    EXPECT_FALSE(plain->layers[0]->as<TransformerBlock>()->attn->qkv_packed());
    // Same parameter objects, names, shapes and values.
    auto pp = plain->named_parameters(), kp = packed->named_parameters();
    ASSERT_EQ(pp.size(), kp.size());
    for (size_t i = 0; i < kp.size(); ++i) {
      EXPECT_EQ(kp[i].value().unsafeGetTensorImpl(), before[i]);
      EXPECT_EQ(kp[i].key(), pp[i].key());
      EXPECT_TRUE(torch::equal(kp[i].value(), pp[i].value())) << kp[i].key();
    }
    EXPECT_EQ(attn->k_proj->weight.data_ptr<float>(), attn->q_proj->weight.data_ptr<float>() + 40 * 40);

    auto tokens = torch::randint(97, {3, 13}), targets = torch::randint(97, {3, 13});
    auto a = run(plain, tokens, targets, bf16), b = run(packed, tokens, targets, bf16);
    const double tol = bf16 ? 2e-2 : 1e-5;
    EXPECT_LT(max_rel(b.loss, a.loss), bf16 ? 1e-3 : 1e-6);
    for (const auto& [name, g] : a.grads) EXPECT_LT(max_rel(b.grads[name], g), tol) << name << " bf16 " << bf16;
  }
}

TEST(QkvPack, UnpackedWeightsFallBackToThreeGemms) {
  torch::manual_seed(32);
  TransformerLM model(odd_config());
  model->pack_qkv();
  auto* attn = model->layers[0]->as<TransformerBlock>()->attn.get();
  {
    torch::NoGradGuard no_grad;  // as a distributed wrapper moving one parameter would
    attn->k_proj->weight.set_data(attn->k_proj->weight.clone());
  }
  EXPECT_FALSE(attn->qkv_packed());
  auto tokens = torch::randint(97, {2, 9});
  EXPECT_NO_THROW(cross_entropy(model(tokens), tokens).backward());
  EXPECT_TRUE(attn->k_proj->weight.grad().defined());
}

}  // namespace lmscale
