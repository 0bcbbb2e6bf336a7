// Data-parallel gradient synchronisation over any list of parameters (C++ modules, raw tensors):
// broadcast from rank 0 at construction, then gradients averaged across ranks by one of four
// policies. Keeps the three pieces of docs/spec.md §6.2 apart: assignment (bucketing.h), marking (the
// per-parameter post-accumulate-grad hook below) and communication (a CommHook on a GradBucket).
// See Note [DDP policies] in ddp.cpp for how naive/flat/overlap/bucketed map onto those pieces.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/function.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distributed/bucketing.h"
#include "distributed/process_group.h"

namespace lmscale::distributed {

enum class DdpStrategy {
  Naive,     // one all-reduce per parameter, all after backward
  Flat,      // one all-reduce of every gradient in one flat buffer, after backward
  Overlap,   // one async all-reduce per parameter, launched as its gradient lands in backward
  Bucketed,  // buckets of at most bucket_mb, each launched (in order) when its last gradient lands
};
// "naive" | "flat" | "overlap" | "bucketed"; throws listing them otherwise.
DdpStrategy parse_ddp_strategy(const std::string& name);
std::string ddp_strategy_name(DdpStrategy s);

struct DdpOptions {
  DdpStrategy strategy = DdpStrategy::Bucketed;
  double bucket_mb = double(kDefaultBucketBytesCap) / (1 << 20);  // Bucketed only
};

// The hand-off from marking to communication: one bucket's flat gradient buffer (the parameters'
// .grad are views into it) plus where each parameter sits in it.
struct GradBucket {
  size_t index = 0;
  at::Tensor buffer;                     // 1-D, contiguous, one dtype and device
  std::vector<int64_t> offsets, lengths; // in elements, one per parameter
  std::vector<at::Tensor> params;
};
// Starts the reduction of bucket.buffer in place and returns its work handle; finish waits on it.
// After the wait the buffer must hold the cross-rank average. Called from the autograd thread.
using CommHook = std::function<c10::intrusive_ptr<c10d::Work>(GradBucket&)>;
// The default hook: divide by the world size, then all-reduce SUM (Gloo has no AVG).
CommHook allreduce_average_hook(const Group& group);

// What happened in the last synchronised step (for tests and benchmarks).
struct DdpStepStats {
  std::vector<size_t> launch_order;   // bucket indices in launch order
  size_t launched_during_backward = 0; // buckets launched by hooks, before finish was called
};

class DistributedDataParallel {
 public:
  // Called once, collectively, on every rank. params: in model order (a tensor listed twice, as a
  // tied weight, is kept once); buffers: tensors that are broadcast but never reduced. Checks that
  // every rank passes the same count, shapes, dtypes and requires_grad flags (throwing with the
  // rank and parameter otherwise), then copies rank 0's values into every rank's params and buffers.
  DistributedDataParallel(std::vector<at::Tensor> params, std::vector<at::Tensor> buffers, Group group,
                          DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // Called after backward, before the optimizer: launches what backward did not, waits for every
  // bucket, and returns with each .grad (of every parameter that requires grad) equal to the
  // average over ranks. A parameter that got no gradient on this rank counts as zero.
  void finish_gradient_synchronization();

  // Zeroes the bucket buffers and points every .grad at its bucket view, so the next backward
  // accumulates in place (no copy into the bucket). Use instead of the optimizer's zero_grad.
  void zero_grad();

  // Replaces the default averaging all-reduce (e.g. to compress); call between steps only.
  void set_comm_hook(CommHook hook) { comm_hook_ = std::move(hook); }

  const std::vector<std::vector<size_t>>& bucket_assignment() const { return assignment_; }
  const std::vector<at::Tensor>& params() const { return params_; }
  const DdpStepStats& last_step() const { return last_step_; }
  const DdpOptions& options() const { return options_; }

 private:
  struct Bucket {
    std::vector<size_t> variables;  // indices into params_
    at::Tensor buffer;
    std::vector<int64_t> offsets, lengths;
    size_t pending = 0;             // gradients not yet ready in this step
    c10::intrusive_ptr<c10d::Work> work;
  };
  struct Slot {                     // where a parameter's gradient lives
    size_t bucket = 0;
    at::Tensor view;                // bucket.buffer slice, shaped like the parameter
  };

  void check_on_group_device(const at::Tensor& t, const char* what, size_t i) const;
  void verify_across_ranks(const std::vector<at::Tensor>& buffers);
  void broadcast_from_rank0(const std::vector<at::Tensor>& tensors);
  void build_buckets(int64_t cap_bytes);
  void register_hooks();
  // Marking: called by the hook (or by finish for policies without hooks) once params_[i]'s
  // gradient is complete for this step.
  void mark_variable_ready(size_t i);
  void launch_ready_buckets_in_order();
  void reset_step();

  std::vector<at::Tensor> params_;
  Group group_;
  DdpOptions options_;
  CommHook comm_hook_;
  std::vector<std::vector<size_t>> assignment_;
  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;                // per parameter (unused when requires_grad is false)
  std::vector<bool> ready_;                // per parameter, this step
  size_t next_bucket_ = 0;                 // buckets launch strictly in index order
  bool in_finish_ = false;
  std::mutex mutex_;                       // hooks may run on autograd worker threads
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks_;
  DdpStepStats step_, last_step_;
};

}  // namespace lmscale::distributed
