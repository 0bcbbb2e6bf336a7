// AdamW with torch.optim.AdamW semantics (decoupled weight decay, bias correction). On CUDA with the
// lmscale kernels (use_kernel, the default) it runs the multi-tensor kernel of src/kernels/
// fused_adamw.cu, which also writes the bf16 copy of each weight that bf16-autocast matmuls read
// (set_bf16_copies); otherwise ATen's fused call (_fused_adamw_) on a GPU, and torch.optim.AdamW's op
// sequence on the CPU. The GPU paths are a handful of launches per step and capturable in a CUDA
// graph (the step counter lives on the device).
// Checked against libtorch's torch::optim::AdamW and an fp64 reference in tests/cpp/train/.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <vector>

#include "model/fp8_linear.h"  // DerivedWeights

namespace lmscale {

struct AdamWOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};

class FusedAdamW {
 public:
  FusedAdamW(std::vector<at::Tensor> params, AdamWOptions options = {}, bool use_kernel = true);
  // Updates every parameter that has a gradient; state tensors are created lazily on first step.
  void step();
  // The same step taken one parameter at a time (optimizer in backward: each update runs as soon as
  // its gradient is final): begin_step() once, then step_param(i) for each param with a gradient.
  // Same numerics as step(): the same per-element update, the step counter advanced once.
  void begin_step();
  void step_param(size_t index);
  // Several parameters at once (one multi-tensor launch), after begin_step(), like step_param.
  void step_params(const std::vector<size_t>& indices);
  // set_to_none (PyTorch's default): gradients become None and the next backward allocates fresh
  // ones (inside a CUDA graph, at the same addresses on every replay). Otherwise they are zeroed
  // in place, and the next backward accumulates into them.
  void zero_grad(bool set_to_none = true);
  const std::vector<at::Tensor>& params() const { return params_; }
  // One bf16 tensor per param (undefined where none is wanted), written with the updated weight on
  // every kernel step. Ignored by the ATen path: whoever reads the copies checks they are current.
  void set_bf16_copies(std::vector<at::Tensor> copies);
  // The learning rate of the next step() / step_param() (a schedule sets it before each step; the
  // kernel reads it as a launch argument, so it must not change inside a captured CUDA graph).
  void set_lr(double lr);
  double lr() const { return opt_.lr; }
  // Weights derived from the params, refreshed after each update (the cached FP8 weights; see
  // DerivedWeights in model/fp8_linear.h). Each param in at most one entry, each with a bf16 copy.
  // `amax_buffer` holds every entry's amax slot: one memset zeroes them all at the start of a step.
  void set_derived_weights(std::vector<DerivedWeights> derived, at::Tensor amax_buffer);
  // Whether the last step() ran the lmscale kernel (false before the first step).
  bool ran_kernel() const { return ran_kernel_; }
  // Optimizer-state bytes (exp_avg + exp_avg_sq + step) currently allocated.
  int64_t state_bytes() const;

  // What a checkpoint keeps (train_app/checkpoint.h): both moments per param (empty before the first
  // step) and the number of updates taken. One count serves every param: the LM never skips a
  // gradient, so torch's per-param counters are all equal. load_state() copies a saved state into
  // place (the kernel path's counter included), so the next step() continues exactly where the saved
  // run stood.
  const std::vector<at::Tensor>& exp_avg() const { return exp_avg_; }
  const std::vector<at::Tensor>& exp_avg_sq() const { return exp_avg_sq_; }
  int64_t step_count() const;
  void load_state(const std::vector<at::Tensor>& exp_avg, const std::vector<at::Tensor>& exp_avg_sq, int64_t steps);

 private:
  void ensure_state();
  void update(const std::vector<size_t>& which, bool advance_kernel_step);

  void start_derived();  // zeroes the amax slots and the per-step bookkeeping
  void finish_derived(const std::vector<size_t>& updated);

  std::vector<at::Tensor> params_, exp_avg_, exp_avg_sq_, steps_, bf16_copies_;
  std::vector<DerivedWeights> derived_;
  at::Tensor derived_amax_;
  std::vector<at::Tensor> amax_of_;          // per param: its derived entry's amax slot, or undefined
  std::vector<int> derived_of_;              // per param: index into derived_, or -1
  std::vector<size_t> derived_pending_;      // per derived entry: params still to update this step
  at::Tensor kernel_step_;  // the kernel path's one step counter (steps_ serve the ATen path)
  AdamWOptions opt_;
  bool use_kernel_ = true, ran_kernel_ = false, kernel_step_advanced_ = false;
};

}  // namespace lmscale
