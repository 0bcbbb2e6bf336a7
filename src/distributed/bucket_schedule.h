// When DDP and ZeRO-2 send a bucket: the per-step bookkeeping between the readiness hooks and the
// collectives (the "marking" piece of docs/spec.md §6.2). It knows which parameters have their
// final gradient in this step, how many each bucket still waits for, and which bucket goes next.
// Buckets launch strictly in index order, so every rank issues the same collectives in the same
// order even when its backward fills them in another; at finish it marks what backward did not
// reach (parameters unused in this step, or every one for the policies without hooks). What
// marking does to a gradient and what a bucket sends stay with DDP and ZeRO-2.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <vector>

#include "distributed/bucketing.h"

namespace lmscale::distributed {

// The parameters once each, in order: a tied weight appears once per use in a module's parameter
// list but has one gradient.
std::vector<at::Tensor> unique_tensors(const std::vector<at::Tensor>& tensors);

// What bucket assignment needs of each parameter (bucketing.h); frozen ones are left out of buckets.
std::vector<TensorInfo> bucket_infos(const std::vector<at::Tensor>& params);

// Where each parameter of one bucket sits in the bucket's flat buffer, in elements.
struct BucketLayout {
  std::vector<int64_t> offsets, lengths;  // one per parameter of the bucket, in its order
  int64_t total = 0;                      // the sum of the lengths
};
BucketLayout bucket_layout(const std::vector<at::Tensor>& params, const std::vector<size_t>& variables);

class BucketSchedule {
 public:
  // Buckets as lists of parameter indices (bucketing.h) over num_params parameters; starts a step.
  void assign(const std::vector<std::vector<size_t>>& assignment, size_t num_params);
  // A new step: no parameter ready, every bucket waiting for all of its parameters, bucket 0 next.
  void start_step();

  bool is_ready(size_t param) const { return ready_[param]; }
  // Records that `param`'s gradient is final in this step; true when that completes its bucket.
  // The owner checks first that it was not ready already (its message names its own API).
  bool mark_ready(size_t param);
  // Calls launch(b) for each bucket from the next one on whose gradients are all ready, in index
  // order, stopping at the first that still waits.
  template <class Launch>
  void launch_ready_in_order(Launch&& launch) {
    while (next_ < pending_.size() && pending_[next_] == 0) {
      launch(next_);
      ++next_;
    }
  }
  // At finish: calls mark(i) for each parameter that requires grad and is not ready yet (in index
  // order; mark is expected to call mark_ready and launch), then asserts every bucket was launched.
  template <class Mark>
  void mark_remaining(const std::vector<at::Tensor>& params, Mark&& mark, const char* owner) {
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].requires_grad() && !ready_[i]) mark(i);
    check_all_launched(owner);
  }

 private:
  void check_all_launched(const char* owner) const;

  std::vector<size_t> bucket_of_;            // per parameter (unused for frozen ones)
  std::vector<size_t> sizes_;                // parameters per bucket
  std::vector<size_t> pending_;              // per bucket, gradients not yet ready in this step
  std::vector<bool> ready_;                  // per parameter, this step
  size_t next_ = 0;                          // buckets launch strictly in index order
};

}  // namespace lmscale::distributed
