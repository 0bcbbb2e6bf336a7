// Data parallelism as the fused default training step (train/training_step.h) plus a communication
// plan, behind one interface: every design of `bench ddp`, `bench zero` and `launch` runs the same
// forward and backward, and differs only in how gradients are synchronised and who updates what.
// The one list of design names and the one factory live here, so a new design is one file (its
// class) and one line (its name in make_data_parallel).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distributed/ddp.h"
#include "distributed/process_group.h"
#include "train/training_step.h"

namespace lmscale::distributed {

class DataParallelStep {
 public:
  virtual ~DataParallelStep() = default;
  virtual std::string name() const = 0;
  // After the backward: returns with every gradient this rank's optimizer needs averaged over ranks
  // (waits for what the backward did not hide).
  virtual void synchronize() = 0;
  // The optimizer on what this rank updates; afterwards every rank can run the next forward.
  virtual void step() = 0;
  virtual void zero_grad() = 0;
  // Makes the current stream wait until every parameter the forward reads is current on this rank
  // (a sharded design gathers them behind the step and the next forward waits stage by stage):
  // call it before reading or writing parameters outside a forward.
  virtual void wait_for_parameters() {}
  virtual void set_lr(double lr) = 0;
  // Bytes this rank holds between steps: optimizer state, and gradients.
  virtual int64_t state_bytes() const = 0;
  virtual int64_t grad_bytes() const = 0;
  // Bytes this rank hands to the collectives per step, and in how many buckets (0: none).
  virtual int64_t payload_bytes_per_step() const = 0;
  virtual int64_t buckets() const = 0;
};

struct DataParallelOptions {
  double bucket_mb = 100;
  double first_bucket_mb = -1;  // negative: same as bucket_mb
  CommDtype comm_dtype = CommDtype::Fp32;
};

// single (no communication: the one-GPU step), naive, flat, overlap, bucketed (DDP's policies: an
// all-reduce, every rank updating everything), zero1, zero2 (the distributed optimizer's layouts).
const std::vector<std::string>& data_parallel_designs();
// Throws naming the list when `design` is not in it.
void check_data_parallel_design(const std::string& design);
// What the forward reads of each parameter, named: its bf16 copy where the step keeps one (a sharded design
// leaves the fp32 masters outside a rank's shard stale), else the parameter. Ranks must agree on these.
std::vector<std::pair<std::string, at::Tensor>> forward_weights(TrainingStep& step);

// Collective (every rank, same arguments): wraps `step` (which must outlive the result) on `group`.
std::unique_ptr<DataParallelStep> make_data_parallel(const std::string& design, TrainingStep& step, const Group& group,
                                                     const DataParallelOptions& options = {});

}  // namespace lmscale::distributed
