// The AdamW update hidden under the backward: parameters are grouped into buckets in the order their
// gradients become final (reverse registration order), and as soon as a bucket's last gradient is
// accumulated its multi-tensor AdamW runs on a second CUDA stream, beside the backward GEMMs of the
// earlier layers. The compute stream waits for the side stream once, at the end of backward. Events
// only, no host sync: a CUDA graph captures the fork and the join. The per-element update is the
// ordinary step's, so parameters stay bit-identical to it (tests/cpp/train/optimizer_overlap_test.cpp).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "train/adamw.h"

namespace lmscale {

// Bucket cap in parameter bytes (fp32): about one xl block (31 M parameters). Smaller buckets start
// the updates sooner but launch more kernels; see docs/training_step_notes.md (optimizer overlap).
constexpr int64_t kOverlapBucketBytes = int64_t{128} << 20;

class OptimizerOverlap {
 public:
  // Installs one post-accumulate-grad hook per parameter of `optimizer` (which must outlive this).
  // sm_carveout > 0 leaves that many SMs out of every cuBLASLt GEMM while backward runs, so the
  // update kernels find SMs free (at::Context::_setSMCarveout_EXPERIMENTAL).
  OptimizerOverlap(FusedAdamW& optimizer, int64_t bucket_bytes = kOverlapBucketBytes, int sm_carveout = 0);
  ~OptimizerOverlap();

  // Arms the hooks for one step's backward (called before it); keep_grads as TrainingStep::run.
  void begin_backward(bool keep_grads);
  // After backward: launches any bucket still pending (a parameter that got no gradient), makes the
  // current stream wait for the side stream, disarms the hooks.
  void finish_backward();
  // Disarms after a backward that threw.
  void abandon();
  size_t bucket_count() const;

  struct State;  // shared with the hooks, which may outlive this object inside autograd

 private:
  std::shared_ptr<State> state_;
};

}  // namespace lmscale
