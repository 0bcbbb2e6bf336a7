// The Transformer's building blocks (docs/spec.md §1): bias-free Linear, Embedding, RMSNorm (fp32
// inside), SwiGLU and interleaved-pair RoPE, with the specified initialisation. Attention lives in
// attention.h, the stack of blocks in transformer.h. Shapes: B batch, T sequence, C model dim.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <utility>

#include "model/grad_destination.h"
#include "ops/fp8_amax.h"
#include "ops/fp8_quantize.h"

namespace lmscale {

// Half-precision tensors upcast to fp32; fp32/fp64 returned as they are. The spec computes norms
// and the loss "in fp32"; keeping fp64 as fp64 lets gradient checks run in double precision.
torch::Tensor at_least_fp32(const torch::Tensor& t);

// In-place truncated normal: mean 0, given std, cut at ±3 std (inverse-CDF sampling, as PyTorch).
void trunc_normal_(torch::Tensor& t, double std);

// While alive, module constructors allocate parameters without initialising them, so a large
// model can be moved to the GPU first and initialised there (init_parameters): initialising
// 2.7B parameters on the host takes far longer than the benchmark itself.
class DeferInitGuard {
 public:
  DeferInitGuard();
  ~DeferInitGuard();
  static bool active();

 private:
  bool prev_;
};

// (Re-)initialises every Linear, Embedding and RMSNorm inside `module` as docs/spec.md §1 specifies,
// on whatever device the parameters live.
void init_parameters(torch::nn::Module& module);

// Which operand of an FP8 Linear an amax slot is for: its input X, its output gradient dY, or neither
// (a slot without a delayed-scaling history).
enum class Fp8Operand { kNone, kInput, kOutputGrad };

class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features);
  torch::Tensor forward(const torch::Tensor& x);  // (..., in) → (..., out)
  // forward on the FP8 path (uses_fp8(x) must hold) with what the neighbouring kernels did for this layer:
  // x already quantized by quantize_fp8_input (null: quantized here), so that layers reading one input share
  // its cast (SwiGLU's W1 and W3), and the slot in which the kernel that writes this layer's output gradient
  // records its amax (ops/fp8_amax.h; undefined: the backward takes dY's amax itself).
  torch::Tensor forward_fp8(const torch::Tensor& x, const ops::Fp8Tensor* quantized_x, const ops::Fp8AmaxSlot& dy_amax);
  // A slot for a producer to record an amax this layer's FP8 casts read (its input's, or its output
  // gradient's), when the layer runs in FP8 (fp8 set, bf16 autocast on) with fp8_producer_amax on;
  // undefined otherwise, so that producers for bf16 layers take no amax. With `operand` named and a
  // history for it (delayed scaling, fp8_history_x / fp8_history_dy), the slot carries the history.
  ops::Fp8AmaxSlot fp8_amax_slot(Fp8Operand operand = Fp8Operand::kNone) const;
  void reset_parameters();                        // trunc normal, std √(2/(in+out))
  // The weight as a matmul without gradient reads it under autocast: the bf16 copy when it is
  // current (see attach_bf16_copy), the weight itself otherwise (autocast then casts it as usual).
  // With gradients, forward goes through linear_on_bf16_copy instead.
  torch::Tensor autocast_weight();
  // True under bf16 autocast on the weight's device while the bf16 copy matches the weight.
  bool bf16_copy_current() const;
  // Keeps a bf16 copy of the weight (returned, for the optimizer to rewrite after each update) that
  // bf16-autocast forwards read instead of casting the fp32 weight again every step. The copy
  // counts as current while the weight's version counter is unchanged: the lmscale AdamW kernel
  // rewrites both through raw pointers (no version bump); any ATen write to the weight (init,
  // load, another optimizer) bumps the version, and the forward falls back to autocast's cast.
  torch::Tensor attach_bf16_copy();
  // Under bf16 autocast, whether this layer's GEMMs run in FP8 (linear_fp8, fp8_linear.h): set by
  // the training step for --precision fp8; shapes FP8 cannot take fall back to the bf16 path.
  bool uses_fp8(const torch::Tensor& x) const;
  // The cached FP8 weight (TransformerLM::attach_fp8_weights), when there is one and the bf16 copy it
  // is refreshed from is current; null otherwise (linear_fp8 then casts the weight itself).
  const ops::Fp8Tensor* fp8_weight() const;
  torch::Tensor weight;                           // (out, in)
  torch::Tensor weight_bf16;                      // undefined unless attach_bf16_copy ran
  int64_t weight_bf16_version = -1;
  bool fp8 = false;
  // Where the weight-gradient GEMM writes on the bf16-copy path (grad_destination.h); null: autograd's
  // .grad. Set by TransformerLM::set_weight_grad_destination; the destination outlives its use.
  WeightGradDestination* grad_destination = nullptr;
  // The amax of the FP8 casts' operands from the kernels that write them (fp8_amax_slot), instead of
  // a pass of its own per cast. Bit-identical either way; off only to compare the two.
  bool fp8_producer_amax = true;
  ops::Fp8Tensor weight_fp8;  // e4m3, both layouts; for packed q/k/v held by q_proj for the block
  // Delayed scaling (Fp8Scaling::kDelayed): the amax histories (ops/fp8_history.h rows) of the X and dY
  // operands that a fused producer writes in FP8 itself, undefined for the others (TransformerLM::
  // use_fp8), and whether they are seeded: false until the first step's roll, which ran dynamic.
  torch::Tensor fp8_history_x, fp8_history_dy;
  bool fp8_history_seeded = false;

 private:
  // x · weightᵀ through linear_fp8 (the bf16 copy and cached FP8 weight when current), x quantized here
  // unless given.
  torch::Tensor fp8_gemm(const torch::Tensor& x, const ops::Fp8Tensor* quantized_x, const ops::Fp8AmaxSlot& dy_amax);
};
TORCH_MODULE(Linear);

// x · copyᵀ under bf16 autocast, where `copy` is the bf16 copy of the row-stacked fp32 `weights`
// (one Linear's weight, or q/k/v packed into one GEMM). The values are those of autocast's cast
// path; the difference is in backward: the weight gradient leaves the GEMM in fp32 (bf16 operands,
// fp32 sums, fp32 output) and is split into the row blocks of `weights`, instead of being rounded
// to bf16 and cast back up to fp32 by one more kernel per weight (xl: 241 copies, ~6 ms a step).
// The input gradient is x's dtype, the copy gets none. With a destination that gives every weight a
// slot, and the slots row blocks of one tensor in order, the GEMM writes the weight gradient there
// (in the slots' dtype) and the weights get no autograd gradient (grad_destination.h).
torch::Tensor linear_on_bf16_copy(const torch::Tensor& x, const torch::Tensor& copy, at::TensorList weights,
                                  WeightGradDestination* destination = nullptr);

class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t num_embeddings, int64_t dim);
  torch::Tensor forward(const torch::Tensor& ids);  // (B, T) int64 → (B, T, C)
  void reset_parameters();                          // trunc normal, std 1
  torch::Tensor weight;                             // (V, C)
};
TORCH_MODULE(Embedding);

class RMSNormImpl : public torch::nn::Module {
 public:
  explicit RMSNormImpl(int64_t dim, double eps = 1e-5);
  // Upcasts to fp32, normalises, scales by the gain and casts back to the input dtype.
  torch::Tensor forward(const torch::Tensor& x);
  // The residual add fused in (ops::rms_norm; one kernel each way on CUDA): h = x + residual
  // (residual undefined: h is x) and y = RMSNorm(h), y already in the autocast dtype when autocast is
  // on (the next matmul would cast it anyway). The same values as h = x + residual; forward(h).
  // The slots (ops/fp8_amax.h), when given, receive y's amax and the residual gradient's amax for the
  // FP8 GEMMs that read y and that wrote the residual.
  std::pair<torch::Tensor, torch::Tensor> add_forward(const torch::Tensor& x, const torch::Tensor& residual,
                                                      const ops::Fp8AmaxSlot& y_amax = {},
                                                      const ops::Fp8AmaxSlot& dresidual_amax = {});
  torch::Tensor gain;  // (C), ones
  double eps;
};
TORCH_MODULE(RMSNorm);

class SwiGLUImpl : public torch::nn::Module {
 public:
  SwiGLUImpl(int64_t d_model, int64_t d_ff);
  // W2(silu(W1 x) ⊙ W3 x). FP8 (ops/fp8_amax.h): x_amax holds x's amax when its producer recorded it,
  // dy_amax is the slot for the amax of the output's gradient (W2's dY), filled by its producer.
  torch::Tensor forward(const torch::Tensor& x, const ops::Fp8AmaxSlot& x_amax = {},
                        const ops::Fp8AmaxSlot& dy_amax = {});
  Linear w1{nullptr}, w2{nullptr}, w3{nullptr};
  bool fused_gate = false;  // silu(·) ⊙ (·) as one kernel each way (ops::swiglu)
};
TORCH_MODULE(SwiGLU);

// Rotates adjacent pairs (2k, 2k+1) of the last dim by pos·θ^(−2k/D). The table is a buffer of
// (max_seq, D/2, 2) holding (cos, sin) of each angle, built once in fp64 and stored in fp32.
class RotaryEmbeddingImpl : public torch::nn::Module {
 public:
  RotaryEmbeddingImpl(double theta, int64_t d_head, int64_t max_seq_len);
  torch::Tensor forward(const torch::Tensor& x);  // (B, H, T, D) → same, positions 0..T-1
  torch::Tensor rotation;
};
TORCH_MODULE(RotaryEmbedding);

}  // namespace lmscale
