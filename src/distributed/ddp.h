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

#include "distributed/bucket_schedule.h"
#include "distributed/bucketing.h"
#include "distributed/process_group.h"
#include "distributed/ready_hook.h"

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

// What gradients travel as. Bf16 halves the bytes (and the time the all-reduce competes with
// backward for SMs and memory bandwidth) at the cost of rounding each rank's gradient to 8 bits of
// mantissa before the sum; see bf16_compress_hook.
enum class CommDtype { Fp32, Bf16 };
// "fp32" | "bf16"; throws listing them otherwise.
CommDtype parse_comm_dtype(const std::string& name);
std::string comm_dtype_name(CommDtype d);

struct DdpOptions {
  DdpStrategy strategy = DdpStrategy::Bucketed;
  double bucket_mb = double(kDefaultBucketBytesCap) / (1 << 20);  // Bucketed only
  // Cap of the first bucket (Bucketed only; MB, negative = same as bucket_mb). Small, so that the
  // first collective starts early in backward, as PyTorch's 1 MB first bucket.
  double first_bucket_mb = -1;
  CommDtype comm_dtype = CommDtype::Fp32;
  // Overlap and Bucketed: after the first step, rebuild the buckets in the order gradients became
  // ready on rank 0 (broadcast so every rank agrees), so buckets launch in the order they fill even
  // when the parameter list is not in reverse execution order.
  bool rebuild_from_ready_order = true;
};

// The hand-off from marking to communication: one bucket's flat gradient buffer (the parameters'
// .grad are views into it) plus where each parameter sits in it.
struct GradBucket {
  size_t index = 0;
  size_t count = 0;                      // buckets this step (index == count - 1: the last one)
  int64_t step = 0;                      // synchronised steps before this one
  // What the default hooks divide the sum by: the world size, or, inside a join with
  // divide_by_initial_world_size off, the ranks still training (set_divisor). A hook of the user's
  // divides as it sees fit (PyTorch's hooks: by the group's size).
  int64_t divisor = 1;
  at::Tensor buffer;                     // 1-D, contiguous, one dtype and device
  std::vector<int64_t> offsets, lengths; // in elements, one per parameter
  std::vector<at::Tensor> params;
};
// Starts the reduction of bucket.buffer in place and returns its work handle; finish waits on it.
// After the wait the buffer must hold the cross-rank average. Called from the autograd thread
// (or, for a rank that joined, from shadow_gradient_synchronization on the caller's).
using CommHook = std::function<c10::intrusive_ptr<c10d::Work>(GradBucket&)>;
// The default hook: divide by bucket.divisor, then all-reduce SUM (Gloo has no AVG; NCCL's AVG when
// the divisor is the world size).
CommHook allreduce_average_hook(const Group& group);
// PyTorch's bf16 compression hook, in C++: cast the bucket into a bf16 copy (kept per bucket across
// steps), all-reduce SUM in bf16, then cast back into the fp32 bucket and divide by the world size
// in fp32. The gradients stay views into the fp32 bucket.
CommHook bf16_compress_hook(const Group& group);

// What happened in the last synchronised step (for tests and benchmarks).
struct DdpStepStats {
  std::vector<size_t> launch_order;   // bucket indices in launch order
  std::vector<size_t> ready_order;    // parameter indices in the order their hooks fired
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
  // PyTorch's register_comm_hook contract: once, before the first synchronised backward (every
  // bucket of every step then goes through `hook`, which must leave the average in the buffer: the
  // reducer no longer divides). Throws naming the rule broken otherwise.
  void register_comm_hook(CommHook hook);

  // What the default hooks divide by (GradBucket::divisor); the world size unless set. A join with
  // divide_by_initial_world_size off sets the number of ranks still training before each backward.
  void set_divisor(int64_t divisor);
  int64_t divisor() const { return divisor_; }

  // For a rank that has run out of data inside a join (Note [DDP join]): issues the collectives one
  // synchronised backward of the other ranks issues — the comm hook over every bucket, in order, on
  // zero-filled copies (this rank contributes nothing), the bucket rebuild after the first step —
  // and waits for them. The parameters' gradients are not touched. Called from the join loop with
  // no backward running.
  void shadow_gradient_synchronization();

  const std::vector<std::vector<size_t>>& bucket_assignment() const { return assignment_; }
  const std::vector<at::Tensor>& params() const { return params_; }
  const DdpStepStats& last_step() const { return last_step_; }
  const DdpOptions& options() const { return options_; }
  // Synchronised steps so far (finish calls).
  int64_t steps() const { return steps_done_; }
  // Bytes this rank hands to the collectives per step (bucket payloads in the comm dtype).
  int64_t payload_bytes_per_step() const;

 private:
  struct Bucket {
    std::vector<size_t> variables;  // indices into params_
    at::Tensor buffer;
    std::vector<int64_t> offsets, lengths;
    c10::intrusive_ptr<c10d::Work> work;
  };
  struct Slot {                     // where a parameter's gradient lives
    size_t bucket = 0;
    at::Tensor view;                // bucket.buffer slice, shaped like the parameter
  };

  void check_on_group_device(const at::Tensor& t, const char* what, size_t i) const;
  void verify_across_ranks(const std::vector<at::Tensor>& buffers);
  void build_buckets(const std::vector<std::vector<size_t>>& assignment);
  void rebuild_buckets_from_ready_order();
  // Marking: called by the hook (or by finish for policies without hooks) once params_[i]'s
  // gradient is complete for this step.
  void mark_variable_ready(size_t i);
  void launch_ready_buckets_in_order();
  void reset_step();
  // The hand-off of bucket `index` over `buffer` (its own, or a zero-filled one for a joined rank).
  GradBucket handoff(size_t index, const at::Tensor& buffer) const;
  c10::intrusive_ptr<c10d::Work> run_comm_hook(GradBucket& bucket);
  void wait_buckets(std::vector<c10::intrusive_ptr<c10d::Work>>& works);
  void rebuild_once();

  std::vector<at::Tensor> params_;
  Group group_;
  DdpOptions options_;
  CommHook comm_hook_;
  bool user_hook_ = false;                 // register_comm_hook ran
  int64_t divisor_ = 1;
  std::vector<std::vector<size_t>> assignment_;
  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;                // per parameter (unused when requires_grad is false)
  BucketSchedule schedule_;                // readiness this step; buckets launch in index order
  bool in_finish_ = false;
  std::mutex mutex_;                       // hooks may run on autograd worker threads
  ReadyHooks hooks_;
  DdpStepStats step_, last_step_;
  int64_t cap_bytes_ = 0, first_cap_bytes_ = -1;
  int64_t steps_done_ = 0;
  bool rebuilt_ = false;
};

}  // namespace lmscale::distributed
