// The distributed optimizer (ZeRO in Megatron-LM's style, on lmscale's fused step): gradients are
// reduce-scattered bucket by bucket while backward runs, the fused AdamW kernel updates this rank's
// shard only (fp32 master weights and moments 1/N), and the weights the forward reads are
// all-gathered bucket by bucket in the order the next forward needs them (the bf16 copies when the
// step keeps them: half the bytes of fp32). The Linear layers' weight-gradient GEMMs write straight
// into the bucket buffers in the communication dtype (model/grad_destination.h): no .grad, no copy,
// no cast pass. Two layouts: ZeRO-1 keeps each bucket's full gradient buffer between steps; ZeRO-2 passes
// the large buckets through a ring of a few reusable buffers, each taken when backward first writes into
// a bucket and handed on once that bucket's reduce-scatter is sent.
// See Note [distributed optimizer layout] in distributed_optimizer.cpp.
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "distributed/bucket_schedule.h"
#include "distributed/bucketing.h"
#include "distributed/ddp.h"  // CommDtype
#include "distributed/process_group.h"
#include "distributed/ready_hook.h"
#include "distributed/sharded_optimizer.h"  // ShardInfo, even_shard
#include "model/grad_destination.h"
#include "train/adamw.h"

namespace lmscale::distributed {

enum class ShardLayout { Zero1, Zero2 };
// "zero1" | "zero2"; throws listing them otherwise.
ShardLayout parse_shard_layout(const std::string& name);
std::string shard_layout_name(ShardLayout l);

struct DistributedOptimizerOptions {
  ShardLayout layout = ShardLayout::Zero1;
  // About one transformer layer of the large models per bucket (Megatron-LM's default is 40M
  // parameters); measured against 25 and 250 MB in docs/distributed.md.
  double bucket_mb = 100;
  double first_bucket_mb = -1;  // negative: same as bucket_mb
  // What the gradients travel and are reduced in. Bf16: the GEMMs round each rank's gradient once,
  // NCCL sums in bf16; the shard is averaged into fp32 before AdamW.
  CommDtype comm_dtype = CommDtype::Fp32;
  AdamWOptions adamw;
  // ZeRO-2: reusable gradient buffers the copy buckets take in turn (Note [ZeRO-2 gradient ring]); 0: a
  // fresh buffer per bucket per step from the caching allocator.
  size_t grad_ring_slots = 3;
  bool use_kernel = true;  // the fused AdamW kernel where it can run (CUDA), else ATen's
};

class DistributedOptimizer : public WeightGradDestination {
 public:
  // Called once, collectively. params: in model order (a tensor listed twice is kept once); copies:
  // one per entry of params (or empty), the bf16 tensor the forward reads instead of that parameter
  // (undefined where it reads the parameter itself); buffers: broadcast from rank 0, never reduced.
  // Trainable parameters and their copies are re-pointed into flat bucket buffers (values kept, the
  // tensor objects and their version counters unchanged, so a copy stays current), then rank 0's
  // values are broadcast and the copies refreshed from them.
  DistributedOptimizer(std::vector<at::Tensor> params, std::vector<at::Tensor> copies, std::vector<at::Tensor> buffers,
                       Group group, DistributedOptimizerOptions options = {});
  ~DistributedOptimizer() override;
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // WeightGradDestination: the parameter's slot in its bucket's gradient buffer (undefined for a
  // tensor this optimizer does not hold); written() marks it ready, which may send its bucket.
  at::Tensor slot(const at::Tensor& weight) override;
  void written(const at::Tensor& weight) override;

  // After backward: sends the buckets backward did not (a parameter without a gradient on this rank
  // counts as zero), waits for every reduce-scatter and averages this rank's shard into fp32.
  void finish_gradient_synchronization();
  // AdamW on this rank's shard, then the all-gathers of every bucket are started (not waited for):
  // wait_for() or wait_for_all() before reading a parameter. Calls finish_… when the caller did not.
  void step();
  // Makes the current stream wait for the all-gathers of the buckets holding these tensors (the
  // forward calls it stage by stage, TransformerLM::before_stage); others are untouched.
  void wait_for(const std::vector<at::Tensor>& tensors);
  void wait_for_all();
  // Drops any .grad autograd left on the parameters (the GEMMs leave none).
  void zero_grad();
  void set_lr(double lr) { local_->set_lr(lr); }

  // Bytes this rank holds between steps: gradients (shard + persistent buckets), optimizer state.
  int64_t grad_bytes() const;
  // Of which ZeRO-2's reusable ring of gradient buffers (a few buckets' worth, whatever the model size).
  int64_t ring_bytes() const;
  int64_t state_bytes() const { return local_->state_bytes(); }
  // Bytes this rank hands to the collectives per step (reduce-scatter inputs + all-gather outputs).
  int64_t payload_bytes_per_step() const;
  // Parameters whose gradient the GEMMs wrote straight into a bucket in the last step.
  size_t written_in_place() const { return last_written_in_place_; }
  size_t launched_during_backward() const { return last_launched_during_backward_; }
  const std::vector<std::vector<size_t>>& bucket_assignment() const { return assignment_; }
  const std::vector<at::Tensor>& params() const { return params_; }
  int64_t steps() const { return steps_done_; }
  const DistributedOptimizerOptions& options() const { return options_; }

 private:
  struct Bucket {
    std::vector<size_t> variables;  // indices into params_, ascending (packed rows stay adjacent)
    std::vector<int64_t> offsets;   // elements, one per variable
    ShardInfo shard;
    bool gathers_copies = false;    // every parameter has a bf16 copy: the all-gather moves bf16
    bool in_ring = false;           // ZeRO-2: its gradients are not kept between steps
    int64_t ring_position = -1;     // its place in ring_order_ (-1: a buffer of its own each step)
    at::Tensor flat_params;         // fp32; the parameters live in it
    at::Tensor flat_copies;         // bf16; the copies live in it (gathers_copies only)
    at::Tensor shard_param;         // this rank's slice of flat_params (what AdamW updates)
    at::Tensor grads;               // full-size gradient buffer in the comm dtype (ZeRO-2: this step's)
    at::Tensor shard_grad_comm;     // the reduce-scatter's output, comm dtype (fp32: shard_param.grad)
    c10::intrusive_ptr<c10d::Work> reduce, gather;
  };
  at::Tensor& bucket_grads(Bucket& b);  // under mutex_
  void take_autograd_grad(size_t i);
  void mark_variable_ready(size_t i);
  void launch_ready_buckets_in_order();
  void reset_step();

  std::vector<at::Tensor> params_;
  Group group_;
  DistributedOptimizerOptions options_;
  std::unique_ptr<FusedAdamW> local_;
  std::vector<std::vector<size_t>> assignment_;
  std::vector<Bucket> buckets_;
  // ZeRO-2: reusable gradient buffers for the copy buckets (Note [ZeRO-2 gradient ring]), and which buckets
  // have been sent in this step.
  std::vector<at::Tensor> ring_;
  std::vector<size_t> ring_order_;  // the buckets that use the ring, in bucket order
  std::vector<bool> launched_;
  std::vector<size_t> bucket_of_, slot_of_;  // per parameter: its bucket and place in it
  std::unordered_map<const void*, size_t> index_of_;  // TensorImpl → parameter index
  BucketSchedule schedule_;
  std::mutex mutex_;  // hooks may run on autograd worker threads
  ReadyHooks hooks_;
  bool in_finish_ = false, finished_ = false;
  size_t written_in_place_ = 0, last_written_in_place_ = 0;
  size_t launched_during_backward_ = 0, last_launched_during_backward_ = 0;
  int64_t steps_done_ = 0;
};

}  // namespace lmscale::distributed
