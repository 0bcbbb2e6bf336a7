// Multi-head self-attention with a pluggable core; see attention.h.
#include "model/attention.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/autocast.h"
#include "core/nvtx.h"
#include "model/fp8_linear.h"
#include "ops/flash_attention.h"
#include "ops/fused_rope.h"

namespace lmscale {

PackedSegments packed_segments(const std::vector<int32_t>& cu_seqlens, int64_t rows, int64_t T, c10::Device device) {
  TORCH_CHECK(cu_seqlens.size() >= 2 && cu_seqlens.front() == 0 && cu_seqlens.back() == rows * T,
              "packed segments: the offsets must run from 0 to rows × T = ", rows * T, ", got ", cu_seqlens.size(),
              " offsets ending at ", cu_seqlens.empty() ? 0 : cu_seqlens.back());
  PackedSegments s;
  int64_t row = 0;
  for (size_t i = 0; i + 1 < cu_seqlens.size(); ++i) {
    const int64_t begin = cu_seqlens[i], end = cu_seqlens[i + 1];
    TORCH_CHECK(begin < end, "packed segments: offset ", i + 1, " (", end, ") does not pass offset ", i, " (", begin,
                "): every segment holds a token");
    if (begin == row * T) ++row;  // this segment starts row `row - 1`
    TORCH_CHECK(end <= row * T, "packed segments: segment ", i, " [", begin, ", ", end, ") crosses the end of row ",
                row - 1, " at ", row * T, ": every row must start a segment");
    s.max_seqlen = std::max(s.max_seqlen, end - begin);
  }
  s.cu_seqlens = torch::tensor(cu_seqlens, torch::kInt).to(device);
  return s;
}

torch::Tensor segment_causal_mask(const PackedSegments& segments, int64_t B, int64_t T) {
  const auto& cu = segments.cu_seqlens;
  // The segment of each position: the last offset at or before it.
  const auto positions = torch::arange(B * T, cu.options());
  const auto id = (torch::searchsorted(cu, positions, /*out_int32=*/false, /*right=*/true) - 1).view({B, T});
  const auto causal = torch::ones({T, T}, cu.options().dtype(torch::kBool)).tril();
  return (id.unsqueeze(2) == id.unsqueeze(1)).logical_and_(causal).unsqueeze(1);  // (B, 1, T, T)
}

torch::Tensor naive_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                              const torch::Tensor& sees) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  torch::Tensor scores;
  {
    ScopedRange r("attention/scores");
    scores = torch::matmul(q, k.transpose(-2, -1)) * scale;  // (B, H, Tq, Tk)
    if (sees.defined()) {
      scores = scores.masked_fill(sees.logical_not(), -std::numeric_limits<float>::infinity());
    } else if (causal) {
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

namespace {

// The packed rows' attention (attention_core with segments). q, k, v (B, H, T, D) → (B, H, T, D).
torch::Tensor segmented_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                                  AttentionBackend backend, const PackedSegments& segments) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  TORCH_CHECK(segments.cu_seqlens.scalar_type() == torch::kInt && segments.cu_seqlens.dim() == 1 &&
                  segments.cu_seqlens.device() == q.device(),
              "packed segments: cu_seqlens must be int32 (S + 1,) on ", q.device(), ", got ",
              segments.cu_seqlens.scalar_type(), " ", segments.cu_seqlens.sizes(), " on ", segments.cu_seqlens.device());
  if (backend == AttentionBackend::Flash) {
    // (B, H, T, D) → (B·T, H, D): the rows back to back, as the varlen op takes them (each row's
    // segments are sequences of their own, so no padding). Autocast does not know the op: one dtype.
    auto packed = [&](const torch::Tensor& t) { return cast_for_autocast(t).transpose(1, 2).reshape({B * T, H, D}); };
    ops::FlashMask mask;
    mask.causal = causal;
    const auto o = ops::flash_attention_varlen(packed(q), packed(k), packed(v), segments.cu_seqlens,
                                               segments.cu_seqlens, segments.max_seqlen, segments.max_seqlen, mask);
    return o.view({B, T, H, D}).transpose(1, 2);
  }
  TORCH_CHECK(causal, "packed segments: the dense cores apply block-diagonal causal attention only");
  const auto sees = segment_causal_mask(segments, B, T);
  if (backend == AttentionBackend::Sdpa) return at::scaled_dot_product_attention(q, k, v, sees, 0.0, false);
  return naive_attention(q, k, v, causal, sees);
}

}  // namespace

torch::Tensor attention_core(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                             AttentionBackend backend, const PackedSegments& segments) {
  if (segments.defined()) return segmented_attention(q, k, v, causal, backend, segments);
  switch (backend) {
    case AttentionBackend::Naive: return naive_attention(q, k, v, causal);
    case AttentionBackend::Sdpa: return at::scaled_dot_product_attention(q, k, v, {}, 0.0, causal);
    case AttentionBackend::Flash:
      // Autocast does not know the lmscale op: give it one dtype, as the projections produced.
      return ops::flash_attention(cast_for_autocast(q), cast_for_autocast(k), cast_for_autocast(v), causal);
  }
  TORCH_INTERNAL_ASSERT(false, "unhandled attention backend");
}

namespace {

// a, b, c lie back to back in one storage, each contiguous: together one (3n, m) matrix.
bool adjacent_rows(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c) {
  if (!a.defined() || !b.defined() || !c.defined()) return false;
  for (const auto* t : {&a, &b, &c})
    if (!t->is_contiguous() || t->sizes() != a.sizes() || t->scalar_type() != a.scalar_type() ||
        !t->storage().is_alias_of(a.storage()))
      return false;
  return b.storage_offset() == a.storage_offset() + a.numel() && c.storage_offset() == b.storage_offset() + b.numel();
}

// The (3n, m) matrix whose row blocks are a, b, c (adjacent_rows holds), without a copy.
torch::Tensor rows_alias(const torch::Tensor& a) {
  return a.as_strided({3 * a.size(0), a.size(1)}, {a.size(1), 1}, a.storage_offset());
}

// The fused projection weight as an autograd node over the three parameters: forward returns the
// alias spanning their row blocks; backward splits the gradient into the three blocks. (With bf16
// copies, forward goes through linear_on_bf16_copy instead.)
struct StackedRows : torch::autograd::Function<StackedRows> {
  static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& a, const torch::Tensor& b,
                               const torch::Tensor& c) {
    (void)b, (void)c;
    return rows_alias(a);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext*, torch::autograd::tensor_list g) {
    auto parts = g[0].chunk(3, 0);
    return {parts[0], parts[1], parts[2]};
  }
};

}  // namespace

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const ModelConfig& cfg)
    : num_heads(cfg.num_heads), backend(cfg.attention) {
  q_proj = register_module("q_proj", Linear(cfg.d_model, cfg.d_model));
  k_proj = register_module("k_proj", Linear(cfg.d_model, cfg.d_model));
  v_proj = register_module("v_proj", Linear(cfg.d_model, cfg.d_model));
  output_proj = register_module("output_proj", Linear(cfg.d_model, cfg.d_model));
  rope = register_module("rope", RotaryEmbedding(cfg.rope_theta, cfg.d_head(), cfg.context_length));
}

bool CausalSelfAttentionImpl::qkv_packed() const {
  return adjacent_rows(q_proj->weight, k_proj->weight, v_proj->weight);
}

void CausalSelfAttentionImpl::pack_qkv() {
  torch::NoGradGuard no_grad;
  Linear lins[3] = {q_proj, k_proj, v_proj};
  if (!qkv_packed()) {
    auto block = torch::cat({q_proj->weight, k_proj->weight, v_proj->weight}, 0);
    // set_data swaps the storage under each parameter (as Module::to does): same tensor objects,
    // so optimizers and named_parameters() see them unchanged.
    for (int i = 0; i < 3; ++i) lins[i]->weight.set_data(block.chunk(3, 0)[i]);
  }
  if (q_proj->weight_bf16.defined() && k_proj->weight_bf16.defined() && v_proj->weight_bf16.defined() &&
      !adjacent_rows(q_proj->weight_bf16, k_proj->weight_bf16, v_proj->weight_bf16)) {
    auto block = torch::cat({q_proj->weight_bf16, k_proj->weight_bf16, v_proj->weight_bf16}, 0);
    for (int i = 0; i < 3; ++i) lins[i]->weight_bf16 = block.chunk(3, 0)[i];
  }
}

torch::Tensor CausalSelfAttentionImpl::packed_bf16_copy() const {
  const bool adjacent = qkv_packed() && adjacent_rows(q_proj->weight_bf16, k_proj->weight_bf16, v_proj->weight_bf16);
  return adjacent ? rows_alias(q_proj->weight_bf16) : torch::Tensor();
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x, const ops::Fp8AmaxSlot& x_amax,
                                               const ops::Fp8AmaxSlot& dy_amax, const PackedSegments& segments) {
  ScopedRange range("attention");
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), H = num_heads, D = C / H;
  // (B, T, C) → (B, T, H, D) → (B, H, T, D): heads split from the last dim.
  auto split = [&](const torch::Tensor& t) { return t.view({B, T, H, D}).transpose(1, 2); };
  auto xc = cast_for_autocast(x);  // once for the three projections
  torch::Tensor q, k, v;
  if (qkv_packed()) {
    // One (B, T, 3C) GEMM; q, k, v are column blocks of its output (views, no copy).
    const bool copies = q_proj->bf16_copy_current() && k_proj->bf16_copy_current() && v_proj->bf16_copy_current() &&
                        adjacent_rows(q_proj->weight_bf16, k_proj->weight_bf16, v_proj->weight_bf16);
    const bool grad = torch::GradMode::is_enabled() && q_proj->weight.requires_grad();
    torch::Tensor qkv;
    // The QKV GEMM's dY is written by the fused RoPE's backward, which then records its amax too.
    ops::Fp8AmaxSlot qkv_dy_amax;
    if (q_proj->uses_fp8(xc)) {
      if (fused_rope) qkv_dy_amax = q_proj->fp8_amax_slot(Fp8Operand::kOutputGrad);
      const auto qx = quantize_fp8_input(xc, x_amax);
      qkv = linear_fp8(xc, rows_alias(copies ? q_proj->weight_bf16 : q_proj->weight),
                       {q_proj->weight, k_proj->weight, v_proj->weight}, copies ? q_proj->fp8_weight() : nullptr, &qx,
                       qkv_dy_amax);
    } else if (copies && grad)
      qkv = linear_on_bf16_copy(xc, rows_alias(q_proj->weight_bf16),
                                {q_proj->weight, k_proj->weight, v_proj->weight}, q_proj->grad_destination);
    else if (grad)
      qkv = torch::linear(xc, StackedRows::apply(q_proj->weight, k_proj->weight, v_proj->weight));
    else
      qkv = torch::linear(xc, rows_alias(copies ? q_proj->weight_bf16 : q_proj->weight));
    if (fused_rope) {
      TORCH_CHECK(T <= rope->rotation.size(0), "sequence length ", T, " exceeds the model's context length ",
                  rope->rotation.size(0), ": raise the context length of the model (--model-context)");
      std::tie(q, k, v) = ops::rope_qkv(qkv, rope->rotation, H, qkv_dy_amax);
    } else {
      auto parts = qkv.chunk(3, -1);
      q = rope(split(parts[0]));
      k = rope(split(parts[1]));
      v = split(parts[2]);
    }
  } else {
    q = rope(split(q_proj(xc)));
    k = rope(split(k_proj(xc)));
    v = split(v_proj(xc));
  }
  auto o = attention_core(q, k, v, /*causal=*/true, backend, segments);  // (B, H, T, D)
  auto o_rows = o.transpose(1, 2).reshape({B, T, C});
  // O's amax stays a pass of the cast: the attention kernels do not take it.
  if (dy_amax && output_proj->uses_fp8(o_rows)) return output_proj->forward_fp8(o_rows, nullptr, dy_amax);
  return output_proj(o_rows);
}

}  // namespace lmscale
