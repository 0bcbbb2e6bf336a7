// One training step of the Transformer LM, shared by every harness that runs the model (bench,
// profile, memory, dist benchmarks): builds the model, optimizer and a random batch on a device,
// and runs forward | forward+backward | full step, with phases wrapped in named ranges
// ("forward", "backward", "optimizer") and, when a clock is given, marked for timing.
#pragma once
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/timer.h"
#include "train/adamw.h"
#include "train/optimizer_overlap.h"
#include "model/config.h"
#include "model/transformer.h"

namespace lmscale {

enum class StepMode { Forward, ForwardBackward, TrainStep };
// forward | forward-backward | train-step (a few aliases accepted); throws listing them otherwise.
StepMode parse_mode(const std::string& name);
std::string mode_name(StepMode m);

// Whether the optimizer runs under the backward when StepSetup::optimizer_overlap is unset, by precision:
// on for fp8, where it made the step faster on an H100 (with delayed scaling: xl 62.77 against 64.67 ms,
// 2.7B 89.65 against 91.16); off for bf16, fp16 and fp32, where it was level or slower
// (docs/training_step_notes.md, "The fp8 default path measured as the default").
inline bool optimizer_overlap_default(c10::ScalarType precision) { return precision == c10::kFloat8_e4m3fn; }

struct StepSetup {
  ModelConfig model = model_config("tiny");
  int64_t batch = 4;
  int64_t context = 128;
  // fp32, or bf16/fp16 = autocast with fp32 weights, or Float8_e4m3fn ("fp8", parse_dtype) = bf16
  // autocast with the GEMMs of the Linear layers `fp8` selects in FP8 (Hopper GPUs only).
  c10::ScalarType precision = c10::kFloat;
  Fp8Layers fp8;
  c10::Device device = c10::Device("cpu");
  AdamWOptions adamw;
  uint64_t seed = 0;
  // The fast path (docs/spec.md §2; what beats torch.compile): fused kernels on CUDA (`--no-fused` turns them
  // off for ablation) and AdamW run per parameter as soon as its gradient is final.
  bool fused = true;
  bool optimizer_in_backward = false;
  // The optimizer hidden under the backward (train/optimizer_overlap.h): AdamW per bucket of
  // parameters on a second CUDA stream as their gradients become final, the backward's GEMMs
  // leaving `overlap_sm_carveout` SMs free. Bit-identical parameters to the ordinary step; ignored
  // when optimizer_in_backward is on.
  std::optional<bool> optimizer_overlap;  // unset: optimizer_overlap_default(precision)
  int overlap_sm_carveout = 0;
  int64_t overlap_bucket_bytes = kOverlapBucketBytes;
  // The pieces of the fused path, each switchable for the ablation table (`lmscale bench --ablate`);
  // they act only while `fused` is true and the device is CUDA.
  struct FusedParts {
    bool adamw_kernel = true;        // AdamW as lmscale's multi-tensor kernel (else ATen's fused AdamW)
    bool bf16_weight_copies = true;  // that kernel also writes the bf16 weights autocast reads
    bool qkv_gemm = true;            // Q, K, V projections as one [3C, C] GEMM
    bool rope_kernel = true;         // with qkv_gemm: split + RoPE of q and k in one kernel
    bool norm_kernel = true;         // each residual add + RMSNorm in one kernel (forward and backward)
    bool swiglu_kernel = true;       // SwiGLU's silu(a) ⊙ b in one kernel
    bool cross_entropy_kernel = true;  // the loss's log-softmax + NLL in one pass over the logits
  } parts;
  // optimizer_overlap as set, else the precision's default.
  bool overlaps_optimizer() const { return optimizer_overlap.value_or(optimizer_overlap_default(precision)); }
};

// Checks a setup before anything is allocated; each failure names the field and the fix.
void validate(const StepSetup& s);

class TrainingStep {
 public:
  explicit TrainingStep(const StepSetup& setup);

  // Runs one step. Forward mode runs without autograd (no activations kept). With a clock, marks
  // are recorded at the start and after each phase: 2 marks (forward), 3, or 4 (train step).
  // Gradients are cleared after the step: set to None (PyTorch's default), or zeroed in place when
  // keep_grads is true (harnesses that want them at fixed addresses; a CUDA graph does not need it).
  void run(StepMode mode, StepClock* clock = nullptr, bool keep_grads = false);

  // The phases of run(), for harnesses that need to act between them (per-phase profiler windows,
  // DDP's finish call). Same ranges and autocast as run(). forward(Forward) runs without autograd;
  // backward() needs a forward in another mode first.
  void forward(StepMode mode);
  void backward();
  void optimizer_step(bool keep_grads = false);

  // Model FLOPs of one step in this mode (matmuls incl. attention, PaLM convention: backward = 2×
  // forward, causal attention counted in full). Used for MFU.
  double flops(StepMode mode) const;
  int64_t tokens() const { return setup_.batch * setup_.context; }

  const StepSetup& setup() const { return setup_; }
  // Fused path on CUDA under bf16 autocast (bf16 or fp8 precision): Linear layers read bf16 weight
  // copies that the AdamW kernel keeps current.
  bool uses_bf16_weight_copies() const;
  // Makes the bf16 weight copies (and the FP8 weights derived from them) again those of the current
  // weights. Needed after anything but the step writes the parameters, e.g. DDP's or ZeRO's broadcast from
  // rank 0 at construction or a checkpoint load: such a write leaves every copy stale (the weight's
  // version moved), and the Linears then fall back to autocast's cast of every weight in every forward.
  // Measured on 2 H100s (docs/results/runs/2026-11-26-8959ce7-distributed): XL bucketed DDP without it ran the slow path.
  void resync_weight_copies();
  // The bf16 copy of each parameter (one per model parameter, undefined where none), as handed to the
  // optimizer; empty when the step keeps none. A data-parallel optimizer takes them over.
  const std::vector<torch::Tensor>& bf16_copies() const { return bf16_copies_; }
  bool is_fp8() const { return setup_.precision == c10::kFloat8_e4m3fn; }
  TransformerLM& model() { return model_; }
  FusedAdamW& optimizer() { return *optimizer_; }
  // Whether run(TrainStep) updates the parameters on a side stream during backward.
  bool overlaps_optimizer() const { return overlap_ != nullptr; }
  const torch::Tensor& inputs() const { return inputs_; }
  // The documents packed into the rows of the next forwards (model/attention.h): attention stays within
  // each segment; undefined (the default): each row is one causal sequence. A harness that packs sets
  // them with every batch.
  void set_segments(PackedSegments segments) { segments_ = std::move(segments); }
  const torch::Tensor& targets() const { return targets_; }
  // Loss of the last step (a device tensor; reading it synchronizes).
  const torch::Tensor& last_loss() const { return loss_; }
  // Drops the last loss and the autograd graph hanging from it (activations of a step that threw
  // part-way, e.g. a failed CUDA-graph capture), so their memory goes back before the next step.
  void release_loss() { loss_ = torch::Tensor(); }

 private:
  void install_optimizer_hooks(const std::vector<torch::Tensor>& params);

  StepSetup setup_;
  TransformerLM model_{nullptr};
  std::unique_ptr<FusedAdamW> optimizer_;
  torch::Tensor inputs_, targets_, loss_;
  PackedSegments segments_;
  std::vector<torch::Tensor> bf16_copies_;
  // Optimizer in backward: what the per-parameter hooks read. Armed only inside run(TrainStep), so
  // harnesses that call forward/backward/optimizer_step themselves get the ordinary step.
  struct InBackward {
    bool armed = false, keep_grads = false;
  };
  std::shared_ptr<InBackward> in_backward_;
  std::unique_ptr<OptimizerOverlap> overlap_;
};

}  // namespace lmscale
