// ZeRO stage 1: optimizer state sharded across ranks, around any libtorch optimizer (built by a
// factory over the rank's shard). Shard math is in plain functions (owner_by_size, even_shard);
// the class only moves gradients and parameters. Gradient averaging for mode BroadcastOwners is
// DDP's job (ddp.h); mode ReduceScatter does its own.
#pragma once
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <vector>

#include "distributed/process_group.h"

namespace lmscale::distributed {

// Mode 1 (BroadcastOwners): whole parameters are owned by one rank each, chosen to balance bytes.
//   Needs averaged gradients (run DDP first). step = the owner updates its parameters, then each
//   parameter is broadcast from its owner. Whole parameters keep any optimizer that is not
//   elementwise (e.g. one with per-tensor norms) exact.
// Mode 2 (ReduceScatter): each param group's parameters are re-pointed into one flat buffer, which
//   is cut into world_size even slices. step = reduce-scatter the raw gradients (sum, then divide),
//   update the own slice, all-gather the slices. Every rank holds exactly 1/N of the state, and the
//   collectives move the same bytes as one all-reduce. Correct for elementwise optimizers (AdamW,
//   Adam, SGD), which is what the flat slices assume.
enum class ZeroMode { BroadcastOwners = 1, ReduceScatter = 2 };
// "1" | "broadcast" | "2" | "reduce-scatter".
ZeroMode parse_zero_mode(const std::string& name);
std::string zero_mode_name(ZeroMode m);

// Builds the wrapped optimizer over this rank's shard. Every group passed in carries its options.
using OptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::optim::OptimizerParamGroup>)>;
OptimizerFactory adamw_factory(torch::optim::AdamWOptions defaults);
OptimizerFactory sgd_factory(torch::optim::SGDOptions defaults);

// ---------------------------------------------------------------- shard math (pure functions)

// Owner rank of each tensor: largest first, each to the rank with the fewest bytes so far (ties:
// lowest rank). `load` carries the bytes already owned per rank (for groups added later) and is
// updated. Deterministic, so every rank computes the same owners without communicating.
std::vector<int> owner_by_size(const std::vector<int64_t>& bytes, std::vector<int64_t>& load);

struct ShardInfo {
  int64_t offset = 0;  // first element of this rank's slice in the flat buffer
  int64_t size = 0;    // elements per rank (the same on every rank)
  int64_t padded_total = 0;  // world_size * size >= total
};
// Even slices of a flat buffer of `total` elements: slices are a multiple of `align` elements so
// each rank's slice starts on an aligned address (vectorised kernels, NCCL's 16-byte preference).
ShardInfo even_shard(int64_t total, int world_size, int rank, int64_t align = 16);

// ---------------------------------------------------------------- the optimizer

class ShardedOptimizer {
 public:
  // Called collectively. groups: the parameter groups as for any libtorch optimizer; a group
  // without options uses the factory's defaults. Parameters must already be equal on every rank
  // (DDP's broadcast does that).
  ShardedOptimizer(std::vector<torch::optim::OptimizerParamGroup> groups, OptimizerFactory factory, Group group,
                   ZeroMode mode);

  // Collective. Mode 1: expects averaged .grad; mode 2: expects this rank's own .grad (a missing
  // .grad counts as zero) and averages it. Returns with every rank holding every updated parameter.
  void step();
  // Mode 2 keeps .grad as views into its flat gradient buffer: zeroing in place avoids a copy in
  // step(). set_to_none=true drops them instead (step() then copies the fresh gradients in).
  void zero_grad(bool set_to_none = false);
  // Collective: every rank adds the same group. Its parameters are sharded like the first ones.
  void add_param_group(const torch::optim::OptimizerParamGroup& group);

  // Optimizer-state bytes held by this rank (tensors in the wrapped optimizer's state).
  int64_t state_bytes() const;
  torch::optim::Optimizer& local() { return *local_; }
  ZeroMode mode() const { return mode_; }
  // Mode 1: owner rank per parameter, in the order given (groups concatenated).
  const std::vector<int>& owners() const { return owners_; }

 private:
  struct FlatGroup {  // mode 2: one user group
    std::vector<at::Tensor> params;
    at::Tensor flat_params, flat_grads;  // padded_total elements each
    ShardInfo shard;
    at::Tensor shard_param;               // view of flat_params: what the local optimizer updates
  };
  void add_group(const torch::optim::OptimizerParamGroup& group);
  void step_broadcast_owners();
  void step_reduce_scatter();

  OptimizerFactory factory_;
  Group group_;
  ZeroMode mode_;
  std::unique_ptr<torch::optim::Optimizer> local_;
  std::vector<at::Tensor> params_;  // every parameter, in order
  std::vector<int> owners_;         // mode 1
  std::vector<int64_t> load_;       // mode 1: bytes owned per rank
  std::vector<FlatGroup> flat_;      // mode 2
};

}  // namespace lmscale::distributed
