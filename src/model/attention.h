// Causal multi-head self-attention with RoPE and a pluggable core: naive (matmul → mask → softmax →
// matmul, with NVTX ranges on each part), sdpa (torch's scaled_dot_product_attention, which picks
// cuDNN/flash/mem-efficient) or flash (lmscale's FlashAttention-2 op). Projections are bias-free.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <vector>

#include "model/config.h"
#include "model/layers.h"

namespace lmscale {

// A batch's rows cut into segments that attention keeps apart (`lmscale train --pack`: one document, or
// the part of one that a row holds, per segment). Over the B·T positions flattened row by row, segment s
// is [cu_seqlens[s], cu_seqlens[s + 1]): int32 (S + 1,) on the model's device, from 0 to B·T, every row
// starting a segment so that none crosses rows; max_seqlen is the longest. Undefined (the default): each
// row is one causal sequence. Positions (RoPE) still run 0..T-1 through the row: scores depend on the
// distance between query and key only, so a segment scores as it would alone.
struct PackedSegments {
  torch::Tensor cu_seqlens;
  int64_t max_seqlen = 0;
  bool defined() const { return cu_seqlens.defined(); }
};

// From offsets on the host (0 first, increasing, every row's start among them: `rows` rows of `T`
// positions), checked; the tensor goes to `device`. Throws naming the broken rule.
PackedSegments packed_segments(const std::vector<int32_t>& cu_seqlens, int64_t rows, int64_t T, c10::Device device);

// (B, 1, T, T) bool: query i sees key j when j <= i and both lie in one segment (block-diagonal causal),
// the mask the naive and sdpa cores apply for packed rows.
torch::Tensor segment_causal_mask(const PackedSegments& segments, int64_t B, int64_t T);

// Plain attention on (B, H, T, D) tensors; the reference every faster core is compared with. `sees`
// (broadcastable to (B, H, T, T) bool), when given, replaces the causal mask: true where a query sees a key.
torch::Tensor naive_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                              const torch::Tensor& sees = {});

// Dispatches the attention core by backend; q, k, v are (B, H, T, D). With segments, causal within each
// segment only: flash runs the varlen op on the rows flattened to (B·T, H, D), naive and sdpa the
// dense segment_causal_mask.
torch::Tensor attention_core(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                             AttentionBackend backend, const PackedSegments& segments = {});

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const ModelConfig& cfg);
  // (B, T, C) → (B, T, C). FP8 (ops/fp8_amax.h): x_amax holds x's amax when its producer recorded it
  // (read by the packed QKV GEMM's cast); dy_amax is the slot for the amax of the output's gradient
  // (the output projection's dY), filled by its producer.
  // `segments`: the packed rows' documents (PackedSegments), undefined for one sequence per row.
  torch::Tensor forward(const torch::Tensor& x, const ops::Fp8AmaxSlot& x_amax = {},
                        const ops::Fp8AmaxSlot& dy_amax = {}, const PackedSegments& segments = {});

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
