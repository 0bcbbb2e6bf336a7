// Transformer LM and loss; see transformer.h.
#include "model/transformer.h"

#include <torch/torch.h>

#include <algorithm>
#include <unordered_map>

#include "core/nvtx.h"
#include "ops/fp8_history.h"

namespace lmscale {

TransformerBlockImpl::TransformerBlockImpl(const ModelConfig& cfg) {
  ln1 = register_module("ln1", RMSNorm(cfg.d_model));
  attn = register_module("attn", CausalSelfAttention(cfg));
  ln2 = register_module("ln2", RMSNorm(cfg.d_model));
  ffn = register_module("ffn", SwiGLU(cfg.d_model, cfg.d_ff));
}

torch::Tensor TransformerBlockImpl::forward(const torch::Tensor& x, const PackedSegments& segments) {
  auto h = x + attn->forward(ln1(x), {}, {}, segments);
  ScopedRange r("ffn");
  return h + ffn(ln2(h));
}

std::pair<torch::Tensor, torch::Tensor> TransformerBlockImpl::forward_fused_norms(const torch::Tensor& x,
                                                                                const torch::Tensor& delta,
                                                                                ops::Fp8AmaxSlot* delta_dy_amax,
                                                                                const PackedSegments& segments) {
  // FP8 amax slots (undefined for bf16 layers): each producer records the amax of an operand it
  // writes, for the cast of the GEMM that reads it. Forward: y1 (QKV's X), y2 (W1/W3's X). Backward:
  // the gradient of attn's output (out_proj's dY, written by ln2) and of this block's delta.
  const auto y1_amax = attn->q_proj->fp8_amax_slot(Fp8Operand::kInput), y2_amax = ffn->w1->fp8_amax_slot(Fp8Operand::kInput);
  const auto attn_dy_amax = attn->output_proj->fp8_amax_slot();
  auto [x1, y1] = ln1->add_forward(x, delta, y1_amax, delta_dy_amax ? *delta_dy_amax : ops::Fp8AmaxSlot());
  auto [h, y2] = ln2->add_forward(x1, attn(y1, y1_amax, attn_dy_amax, segments), y2_amax, attn_dy_amax);
  ScopedRange r("ffn");
  const auto ffn_dy_amax = ffn->w2->fp8_amax_slot();
  if (delta_dy_amax) *delta_dy_amax = ffn_dy_amax;
  return {h, ffn(y2, y2_amax, ffn_dy_amax)};
}

TransformerLMImpl::TransformerLMImpl(const ModelConfig& cfg) : config(cfg) {
  cfg.validate();
  token_embeddings = register_module("token_embeddings", Embedding(cfg.vocab_size, cfg.d_model));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.num_layers; ++i) layers->push_back(TransformerBlock(cfg));
  ln_final = register_module("ln_final", RMSNorm(cfg.d_model));
  lm_head = register_module("lm_head", Linear(cfg.d_model, cfg.vocab_size));
}

torch::Tensor TransformerLMImpl::forward(const torch::Tensor& tokens, const PackedSegments& segments) {
  TORCH_CHECK(tokens.dim() == 2 && tokens.scalar_type() == torch::kLong,
              "tokens must be int64 of shape (batch, seq), got ", tokens.scalar_type(), " ", tokens.sizes());
  TORCH_CHECK(tokens.size(1) <= config.context_length, "sequence length ", tokens.size(1),
              " exceeds the model's context length ", config.context_length,
              ": shorten the input or build the model with a longer context");
  auto stage = [this](int64_t i) {
    if (before_stage) before_stage(i);
  };
  stage(0);
  auto x = token_embeddings(tokens);
  const int64_t L = static_cast<int64_t>(layers->size());
  if (fused_norms) {
    torch::Tensor delta;  // the residual stream is x + delta; each norm adds them as it reads them
    ops::Fp8AmaxSlot delta_dy_amax;  // the slot for delta's gradient amax, which the next norm writes
    for (int64_t i = 0; i < L; ++i) {
      stage(i + 1);
      std::tie(x, delta) = layers[static_cast<size_t>(i)]->as<TransformerBlock>()->forward_fused_norms(x, delta, &delta_dy_amax, segments);
    }
    stage(L + 1);
    return lm_head(ln_final->add_forward(x, delta, {}, delta_dy_amax).second);
  }
  for (int64_t i = 0; i < L; ++i) {
    stage(i + 1);
    x = layers[static_cast<size_t>(i)]->as<TransformerBlock>()->forward(x, segments);
  }
  stage(L + 1);
  return lm_head(ln_final(x));
}

void TransformerLMImpl::set_weight_grad_destination(WeightGradDestination* destination) {
  for (auto& m : modules(/*include_self=*/false))
    if (auto* lin = m->as<LinearImpl>()) lin->grad_destination = destination;
}

void TransformerLMImpl::pack_qkv() {
  for (const auto& layer : *layers) layer->as<TransformerBlock>()->attn->pack_qkv();
}

void TransformerLMImpl::use_fused_rope(bool on) {
  for (const auto& layer : *layers) layer->as<TransformerBlock>()->attn->fused_rope = on;
}

void TransformerLMImpl::use_fused_swiglu(bool on) {
  for (const auto& layer : *layers) layer->as<TransformerBlock>()->ffn->fused_gate = on;
}

const char* fp8_scaling_name(Fp8Scaling s) { return s == Fp8Scaling::kDelayed ? "delayed" : "dynamic"; }

Fp8Scaling parse_fp8_scaling(const std::string& name) {
  if (name == "delayed") return Fp8Scaling::kDelayed;
  if (name == "dynamic") return Fp8Scaling::kDynamic;
  TORCH_CHECK(false, "fp8 scaling '", name, "' is not one of: delayed, dynamic");
}

void TransformerLMImpl::use_fp8(const Fp8Layers& f) {
  auto mark = [&](LinearImpl& lin, bool group_on) {
    lin.fp8 = group_on && std::min(lin.weight.size(0), lin.weight.size(1)) >= f.min_dim;
    lin.fp8_producer_amax = f.producer_amax;
    lin.fp8_history_x = lin.fp8_history_dy = torch::Tensor();
    lin.fp8_history_seeded = false;
  };
  for (const auto& layer : *layers) {
    auto* block = layer->as<TransformerBlock>();
    for (auto* lin : {block->attn->q_proj.get(), block->attn->k_proj.get(), block->attn->v_proj.get()})
      mark(*lin, f.qkv);
    mark(*block->attn->output_proj, f.out_proj);
    for (auto* lin : {block->ffn->w1.get(), block->ffn->w2.get(), block->ffn->w3.get()}) mark(*lin, f.ffn);
  }
  mark(*lm_head, f.lm_head);
  fp8_histories = torch::Tensor();
  if (f.scaling != Fp8Scaling::kDelayed || !f.producer_amax) return;
  // A history for each operand that a fused producer can write in FP8 (Fp8Scaling's list) and whose
  // consumer is certain to be the FP8 GEMM: the producer hands on a bf16 tensor it never wrote, so a
  // consumer that fell back to bf16 would read garbage. Hence only Linears whose both weight dims are
  // multiples of 16 (fp8_linear_ok then depends on the token count alone, which the producers check)
  // and only the consumers that take the producer's slot: RMSNorm's y (packed QKV's X; W1's and W3's
  // X, one cast), the gate's output (W2's X) and gradients (W1's and W3's dY), RoPE's backward output
  // (the packed QKV GEMM's dY).
  std::vector<std::pair<torch::Tensor*, torch::ScalarType>> wanted;
  auto fp8_16 = [](const Linear& lin) {
    return lin->fp8 && lin->weight.size(0) % 16 == 0 && lin->weight.size(1) % 16 == 0;
  };
  for (const auto& layer : *layers) {
    auto* block = layer->as<TransformerBlock>();
    auto& ffn = *block->ffn;
    auto& attn = *block->attn;
    const bool packed_qkv = attn.qkv_packed() && fp8_16(attn.q_proj) && fp8_16(attn.k_proj) && fp8_16(attn.v_proj);
    const bool w13 = fp8_16(ffn.w1) && fp8_16(ffn.w3);
    if (fused_norms && packed_qkv) wanted.push_back({&attn.q_proj->fp8_history_x, torch::kFloat8_e4m3fn});
    if (fused_norms && w13) wanted.push_back({&ffn.w1->fp8_history_x, torch::kFloat8_e4m3fn});
    if (ffn.fused_gate && fp8_16(ffn.w2)) wanted.push_back({&ffn.w2->fp8_history_x, torch::kFloat8_e4m3fn});
    if (ffn.fused_gate && w13) {
      wanted.push_back({&ffn.w1->fp8_history_dy, torch::kFloat8_e5m2});
      wanted.push_back({&ffn.w3->fp8_history_dy, torch::kFloat8_e5m2});
    }
    if (attn.fused_rope && packed_qkv) wanted.push_back({&attn.q_proj->fp8_history_dy, torch::kFloat8_e5m2});
  }
  if (wanted.empty()) return;
  std::vector<torch::ScalarType> formats;
  for (const auto& w : wanted) formats.push_back(w.second);
  fp8_histories = ops::new_fp8_histories(formats, lm_head->weight.device());
  for (size_t i = 0; i < wanted.size(); ++i) *wanted[i].first = fp8_histories[static_cast<int64_t>(i)];
}

void TransformerLMImpl::roll_fp8_histories() {
  if (!fp8_histories.defined()) return;
  ops::roll_fp8_histories(fp8_histories);
  for (auto& m : modules(/*include_self=*/false))
    if (auto* lin = m->as<LinearImpl>())
      lin->fp8_history_seeded = lin->fp8_history_x.defined() || lin->fp8_history_dy.defined();
}

std::vector<torch::Tensor> TransformerLMImpl::attach_bf16_copies() {
  for (auto& m : modules(/*include_self=*/false))
    if (auto* lin = m->as<LinearImpl>()) lin->attach_bf16_copy();
  bool packed = false;
  for (const auto& layer : *layers) packed = packed || layer->as<TransformerBlock>()->attn->qkv_packed();
  if (packed) pack_qkv();  // the q, k, v copies as one block too
  // parameters() lists each module's own parameters before its children's, modules in pre-order:
  // walking modules() the same way pairs every parameter with its module, hence with its copy.
  std::vector<torch::Tensor> copies;
  for (auto& m : modules(/*include_self=*/true)) {
    auto* lin = m->as<LinearImpl>();
    for (const auto& p : m->parameters(/*recurse=*/false))
      copies.push_back(lin && p.is_same(lin->weight) ? lin->weight_bf16 : torch::Tensor());
  }
  TORCH_INTERNAL_ASSERT(copies.size() == parameters().size(), "attach_bf16_copies: ", copies.size(), " copies for ",
                        parameters().size(), " parameters");
  return copies;
}

std::vector<DerivedWeights> TransformerLMImpl::attach_fp8_weights(torch::Tensor& amax_buffer, bool delayed) {
  torch::NoGradGuard no_grad;
  // Index of each Linear's weight in parameters(), walked as attach_bf16_copies walks it.
  std::unordered_map<const LinearImpl*, size_t> index;
  size_t k = 0;
  for (auto& m : modules(/*include_self=*/true)) {
    auto* lin = m->as<LinearImpl>();
    for (const auto& p : m->parameters(/*recurse=*/false)) {
      if (lin && p.is_same(lin->weight)) index[lin] = k;
      ++k;
    }
  }
  struct Operand {
    LinearImpl* holder;
    torch::Tensor source;
    std::vector<size_t> params;
  };
  std::vector<Operand> operands;
  auto single = [&](LinearImpl& lin) {
    if (lin.fp8 && lin.weight_bf16.defined()) operands.push_back({&lin, lin.weight_bf16, {index.at(&lin)}});
  };
  for (const auto& layer : *layers) {
    auto& attn = *layer->as<TransformerBlock>()->attn;
    if (auto packed = attn.packed_bf16_copy(); packed.defined()) {
      if (attn.q_proj->fp8)
        operands.push_back({attn.q_proj.get(), packed,
                            {index.at(attn.q_proj.get()), index.at(attn.k_proj.get()), index.at(attn.v_proj.get())}});
    } else {
      for (auto* lin : {attn.q_proj.get(), attn.k_proj.get(), attn.v_proj.get()}) single(*lin);
    }
    single(*attn.output_proj);
    auto& ffn = *layer->as<TransformerBlock>()->ffn;
    for (auto* lin : {ffn.w1.get(), ffn.w2.get(), ffn.w3.get()}) single(*lin);
  }
  single(*lm_head);
  amax_buffer = torch::zeros({static_cast<int64_t>(operands.size())},
                             torch::TensorOptions().dtype(torch::kInt).device(lm_head->weight.device()));
  fp8_weight_histories = torch::Tensor();
  fp8_cached_weights.clear();
  const auto params = parameters();
  if (delayed && !operands.empty())
    fp8_weight_histories = ops::new_fp8_histories(std::vector<torch::ScalarType>(operands.size(), torch::kFloat8_e4m3fn),
                                                  lm_head->weight.device());
  std::vector<DerivedWeights> out;
  for (size_t i = 0; i < operands.size(); ++i) {
    auto& op = operands[i];
    op.holder->weight_fp8 = ops::fp8_quantize(op.source, torch::kFloat8_e4m3fn, true, true);
    auto amax = amax_buffer.slice(0, i, i + 1);
    LinearImpl* holder = op.holder;
    torch::Tensor source = op.source;
    if (!delayed) {
      out.push_back({op.params, amax, [holder, source, amax] { ops::fp8_quantize_into(source, amax, holder->weight_fp8); }});
      continue;
    }
    auto history = fp8_weight_histories[static_cast<int64_t>(i)];
    auto seeded = std::make_shared<bool>(false);
    fp8_cached_weights.push_back({holder, seeded});
    // Each param's rows of the row-major FP8 weight: the params stack by rows in the order given
    // (packed q, k, v as in the bf16 block), so their bytes are consecutive slices of the flat weight.
    std::vector<torch::Tensor> rows;
    int64_t offset = 0;
    auto flat = holder->weight_fp8.data.view(-1);
    for (size_t k : op.params) {
      const int64_t n = params[k].numel();
      rows.push_back(flat.narrow(0, offset, n));
      offset += n;
    }
    TORCH_INTERNAL_ASSERT(offset == flat.numel(), "attach_fp8_weights: the params do not tile the FP8 weight");
    out.push_back({op.params, amax,
                   [holder, source, amax, history, seeded] {
                     if (*seeded) return ops::fp8_weight_finish(holder->weight_fp8, history);
                     // The first update: the dynamic cast, its amax seeding the history.
                     ops::fp8_quantize_into(source, amax, holder->weight_fp8);
                     ops::fold_fp8_amax(history, amax);
                     ops::roll_fp8_histories(history.unsqueeze(0));
                     *seeded = true;
                   },
                   history, rows, seeded});
  }
  return out;
}

torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  auto flat = at_least_fp32(logits.reshape({-1, logits.size(-1)}));
  return torch::nn::functional::cross_entropy(flat, targets.reshape({-1}));
}

}  // namespace lmscale
