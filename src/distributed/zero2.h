// ZeRO stage 2: gradients and AdamW state sharded across ranks, with the gradient reduction
// overlapped with backward. Each bucket of gradients (DDP's assignment: reverse model order, a cap,
// an optional small first bucket) is reduce-scattered into this rank's slice of the bucket as soon
// as its last gradient is final; the full-size gradients of a bucket are freed once it is sent, so
// what stays per rank is 1/N of the gradients and 1/N of the optimizer state. step() runs AdamW on
// the slices and all-gathers the parameters. See Note [ZeRO-2 layout] in zero2.cpp.
#pragma once
#include <torch/csrc/autograd/function.h>
#include <torch/optim/adamw.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distributed/bucket_schedule.h"
#include "distributed/bucketing.h"
#include "distributed/process_group.h"
#include "distributed/ready_hook.h"
#include "distributed/sharded_optimizer.h"

namespace lmscale::distributed {

struct Zero2Options {
  double bucket_mb = double(kDefaultBucketBytesCap) / (1 << 20);
  double first_bucket_mb = -1;  // negative: same as bucket_mb
};

class Zero2 {
 public:
  // Called once, collectively. params: in model order (a tied weight listed twice is kept once);
  // parameters with requires_grad=false and `buffers` are broadcast from rank 0 but never sharded.
  // Every rank must pass the same shapes in the same order. Trainable parameters are re-pointed
  // into one flat buffer per bucket (their values are kept), so hold no views of them across this.
  Zero2(std::vector<at::Tensor> params, std::vector<at::Tensor> buffers, Group group,
        torch::optim::AdamWOptions adamw, Zero2Options options = {});
  ~Zero2();
  Zero2(const Zero2&) = delete;
  Zero2& operator=(const Zero2&) = delete;

  // After backward: launches the buckets backward did not, waits for every reduce-scatter and
  // averages this rank's gradient slices. A parameter without a gradient on this rank counts as 0.
  // step() calls it when the caller did not.
  void finish_gradient_synchronization();
  // AdamW on this rank's slices, then every parameter all-gathered. Collective.
  void step();
  // Drops any .grad left on the parameters (normally already freed when its bucket was sent).
  void zero_grad();

  // Bytes held by this rank between steps: gradient slices, AdamW state.
  int64_t grad_bytes() const;
  int64_t state_bytes() const;
  // Bytes this rank hands to the collectives per step (reduce-scatter input + all-gather output).
  int64_t payload_bytes_per_step() const;
  const std::vector<std::vector<size_t>>& bucket_assignment() const { return assignment_; }
  const std::vector<at::Tensor>& params() const { return params_; }
  int64_t steps() const { return steps_done_; }
  size_t launched_during_backward() const { return last_launched_during_backward_; }

 private:
  struct Bucket {
    std::vector<size_t> variables;        // indices into params_
    std::vector<int64_t> offsets;         // elements, one per variable
    ShardInfo shard;
    at::Tensor flat_params;               // shard.padded_total elements; the parameters live in it
    at::Tensor shard_param;               // this rank's slice of flat_params (what AdamW updates)
    at::Tensor sending;                   // the bucket's full gradients while they are reduce-scattered
    c10::intrusive_ptr<c10d::Work> work;
  };
  void mark_variable_ready(size_t i);
  void launch_ready_buckets_in_order();
  void reset_step();

  std::vector<at::Tensor> params_;
  Group group_;
  Zero2Options options_;
  std::unique_ptr<torch::optim::AdamW> local_;
  std::vector<std::vector<size_t>> assignment_;
  std::vector<Bucket> buckets_;
  BucketSchedule schedule_;               // readiness this step; buckets launch in index order
  bool in_finish_ = false, finished_ = false;
  size_t launched_during_backward_ = 0, last_launched_during_backward_ = 0;
  int64_t steps_done_ = 0;
  std::mutex mutex_;
  ReadyHooks hooks_;
};

}  // namespace lmscale::distributed
