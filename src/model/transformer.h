// The pre-norm decoder-only Transformer LM of docs/spec.md §1: embedding → L × Block → RMSNorm → LM
// head (untied). Block: h = x + Attn(RMSNorm(x)); out = h + SwiGLU(RMSNorm(h)). Also the loss.
// Knows nothing of distribution or timing.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/attention.h"
#include "model/config.h"
#include "model/fp8_linear.h"
#include "model/layers.h"

namespace lmscale {

// Which Linear layers run their GEMMs in FP8 under `--precision fp8` (linear_fp8), by group, and the
// smallest layer that does: a layer with min(in, out) below min_dim stays bf16, where the casts cost
// more than the faster GEMM saves. The defaults come from the per-GEMM H100 timings (FP8 buys
// small 1.10× before casts, xl 1.56×, 2.7B 1.73×): every block layer of medium and up in FP8, small
// all bf16, the LM head bf16. Not yet measured end to end: docs/training_step_notes.md (FP8) has the
// ablation that decides them (scripts/gpu/gpu_check.sh, stage fp8-ablate).
constexpr int64_t kFp8MinDim = 1024;

// How FP8 operands get their per-tensor scale (docs/training_step_notes.md, delayed scaling):
//   kDynamic  from this step's amax of the operand: a cast pass after the kernel that writes it.
//   kDelayed  from the max of the operand's amax over the last kernels::kFp8HistoryLen steps, known
//             before its producer runs, so the producer writes the FP8 bytes itself: RMSNorm's forward
//             (the X of QKV and of W1/W3), the SwiGLU gate (forward: W2's X; backward: W1's and W3's
//             dY) and RoPE's backward (the QKV GEMM's dY); and AdamW writes the cached FP8 weights
//             (attach_fp8_weights). The attention output and the residual stream's gradients keep the
//             dynamic cast. The first step runs dynamic and seeds the histories.
enum class Fp8Scaling { kDynamic, kDelayed };
constexpr Fp8Scaling kFp8ScalingDefault = Fp8Scaling::kDelayed;
// "dynamic" / "delayed", the spelling of --fp8-scaling and of the records' fp8_scaling field.
const char* fp8_scaling_name(Fp8Scaling s);
// The inverse; throws naming the allowed values.
Fp8Scaling parse_fp8_scaling(const std::string& name);

struct Fp8Layers {
  bool qkv = true;       // the Q, K, V projections (one GEMM when packed)
  bool out_proj = true;  // the attention output projection
  bool ffn = true;       // W1, W3, W2 of SwiGLU
  bool lm_head = false;  // the vocabulary projection, kept bf16 as torchao and Megatron-LM keep it
  int64_t min_dim = kFp8MinDim;
  // The weights quantized once per step, right after their update, with the amax the AdamW kernel
  // takes as it writes the bf16 copies (attach_fp8_weights), instead of amax + cast in every forward.
  bool cached_weights = true;
  // The activations' and gradients' amax taken by the kernels that write them (RMSNorm, the SwiGLU
  // gate, RoPE's backward; LinearImpl::fp8_producer_amax) instead of a pass per cast. Bit-identical.
  bool producer_amax = true;
  // Delayed scaling needs the producers' slots (producer_amax) and the fused kernels that write the operands.
  Fp8Scaling scaling = kFp8ScalingDefault;
};

class TransformerBlockImpl : public torch::nn::Module {
 public:
  explicit TransformerBlockImpl(const ModelConfig& cfg);
  // (B, T, C) → (B, T, C); `segments`: the packed rows' documents (attention.h), undefined for none.
  torch::Tensor forward(const torch::Tensor& x, const PackedSegments& segments = {});
  // The same block with each residual add fused into the RMSNorm that reads its sum: the input is
  // x + delta (delta undefined: x), the output (h, f) with h + f the block's output, the add left to
  // the next norm (the next block's ln1, or ln_final).
  // `delta_dy_amax` (ops/fp8_amax.h), when given, carries the FP8 amax slot of delta's gradient from
  // block to block: on entry the slot of the incoming delta (its gradient is written by ln1's backward,
  // for the previous block's W2), on return that of the returned f (this block's W2 output).
  std::pair<torch::Tensor, torch::Tensor> forward_fused_norms(const torch::Tensor& x, const torch::Tensor& delta,
                                                              ops::Fp8AmaxSlot* delta_dy_amax = nullptr,
                                                              const PackedSegments& segments = {});
  RMSNorm ln1{nullptr}, ln2{nullptr};
  CausalSelfAttention attn{nullptr};
  SwiGLU ffn{nullptr};
};
TORCH_MODULE(TransformerBlock);

class TransformerLMImpl : public torch::nn::Module {
 public:
  explicit TransformerLMImpl(const ModelConfig& cfg);
  // (B, T) int64 → logits (B, T, V). `segments` (attention.h): rows packed with documents, attention
  // kept within each; undefined (the default): one causal sequence per row.
  torch::Tensor forward(const torch::Tensor& tokens, const PackedSegments& segments = {});
  // Every block's q, k, v weights as one [3C, C] GEMM operand (CausalSelfAttentionImpl::pack_qkv).
  void pack_qkv();
  // Every block's QKV split + RoPE as one kernel (CausalSelfAttentionImpl::fused_rope; needs pack_qkv).
  void use_fused_rope(bool on);
  // Every residual add fused with the RMSNorm after it (RMSNormImpl::add_forward, one kernel each
  // way on CUDA); the values are those of the plain forward.
  void use_fused_norms(bool on) { fused_norms = on; }
  // Every SwiGLU's silu(W1 x) ⊙ W3 x as one kernel each way (SwiGLUImpl::fused_gate).
  void use_fused_swiglu(bool on);
  // Marks the Linear layers `layers` selects as FP8 (LinearImpl::fp8); the rest are unmarked.
  void use_fp8(const Fp8Layers& layers);
  // Gives every Linear a bf16 copy of its weight (LinearImpl::attach_bf16_copy; packed q, k, v copies
  // as one block when the weights are packed) and hands them over for the optimizer to keep current:
  // one tensor per entry of parameters(), in that order, undefined where the parameter has no copy.
  // Call once, after pack_qkv and before the first forward that should read the copies.
  std::vector<torch::Tensor> attach_bf16_copies();
  // After attach_bf16_copies and use_fp8: quantizes each FP8 GEMM weight operand (one per FP8
  // Linear, one per packed q/k/v block) once, keeps it on its Linear (LinearImpl::weight_fp8) and
  // returns how to keep it current: per operand, the parameters it derives from and a refresh that
  // re-quantizes it from the bf16 copy with the amax the AdamW kernel took (FusedAdamW::
  // set_derived_weights). The forward then casts no weight. `amax_buffer` gets every amax slot.
  // Under delayed scaling (`delayed`) each entry also gets a weight history (a row of fp8_weight_histories)
  // and its FP8 rows per parameter, for AdamW to write the FP8 weight itself (DerivedWeights).
  std::vector<DerivedWeights> attach_fp8_weights(torch::Tensor& amax_buffer, bool delayed = false);
  // End of a training step (after the backward), under delayed scaling: folds the step's amax of every
  // operand with a history into it and sets the next step's scales (ops::roll_fp8_histories; one kernel,
  // inside the step's CUDA graph). The first call also marks the histories seeded, so the steps after
  // the first (which ran dynamic) write those operands in FP8 from their producers. No-op otherwise.
  void roll_fp8_histories();
  // Every Linear's weight-gradient GEMM writes where `destination` says (grad_destination.h; null:
  // autograd's .grad again). The caller keeps the destination alive while it is set.
  void set_weight_grad_destination(WeightGradDestination* destination);
  // Called by forward before each stage that reads parameters: 0 the embedding, 1..num_layers the
  // blocks, num_layers + 1 the final norm and the head. A data-parallel optimizer waits there for the
  // parameters it gathers, so each stage waits only for its own (empty: nothing is called).
  std::function<void(int64_t stage)> before_stage;
  ModelConfig config;
  // Every delayed-scaling history of the model, one row per operand (use_fp8 allocates it; undefined
  // under dynamic scaling). The Linears hold views of its rows.
  torch::Tensor fp8_histories;
  // The weights' histories under delayed scaling (attach_fp8_weights), rolled by their refresh after
  // each update, not by roll_fp8_histories (the update may run under the backward, before that roll).
  torch::Tensor fp8_weight_histories;
  // Row k of fp8_weight_histories belongs to the cached FP8 weight of fp8_cached_weights[k]: the Linear
  // holding it (weight_fp8) and whether its history is seeded (false until its first update; shared with
  // the refresh that reads it). With the histories, what a checkpoint keeps of delayed scaling
  // (train_app/fp8_checkpoint.h). Filled by attach_fp8_weights under delayed scaling, empty otherwise.
  struct Fp8CachedWeight {
    LinearImpl* holder = nullptr;
    std::shared_ptr<bool> seeded;
  };
  std::vector<Fp8CachedWeight> fp8_cached_weights;
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
