// ZeRO-1 sharded optimizer: shard math (owner_by_size, even_shard), then the two step recipes.
// Both run their collectives on the backend's own stream (NCCL orders it after the compute stream
// with an event, not a host sync), so step() returns without waiting for the GPU except where a
// collective's result is needed on the host (never, here).
#include "distributed/sharded_optimizer.h"

#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <numeric>

#include "distributed/fault.h"
#include "distributed/flat_view.h"

namespace lmscale::distributed {

ZeroMode parse_zero_mode(const std::string& name) {
  if (name == "1" || name == "broadcast") return ZeroMode::BroadcastOwners;
  if (name == "2" || name == "reduce-scatter") return ZeroMode::ReduceScatter;
  TORCH_CHECK(false, "ZeRO mode '", name, "' is unknown; choose 1 (broadcast: owners broadcast updated params) "
              "or 2 (reduce-scatter grads + all-gather params).");
  return ZeroMode::BroadcastOwners;
}

std::string zero_mode_name(ZeroMode m) { return m == ZeroMode::BroadcastOwners ? "broadcast" : "reduce-scatter"; }

OptimizerFactory adamw_factory(torch::optim::AdamWOptions defaults) {
  return [defaults](std::vector<torch::optim::OptimizerParamGroup> groups) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<torch::optim::AdamW>(std::move(groups), defaults);
  };
}

OptimizerFactory sgd_factory(torch::optim::SGDOptions defaults) {
  return [defaults](std::vector<torch::optim::OptimizerParamGroup> groups) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<torch::optim::SGD>(std::move(groups), defaults);
  };
}

// ---------------------------------------------------------------- shard math

std::vector<int> owner_by_size(const std::vector<int64_t>& bytes, std::vector<int64_t>& load) {
  TORCH_CHECK(!load.empty(), "owner_by_size: load has no ranks; pass one entry per rank.");
  std::vector<size_t> order(bytes.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first (stable on ties, so every rank sees the same order) is greedy LPT scheduling:
  // the heaviest rank ends at most one tensor above the average.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bytes[a] > bytes[b]; });
  std::vector<int> owner(bytes.size(), 0);
  for (size_t i : order) {
    int best = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = best;
    load[best] += bytes[i];
  }
  return owner;
}

ShardInfo even_shard(int64_t total, int world_size, int rank, int64_t align) {
  TORCH_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "even_shard: rank ", rank, " is not in [0, ",
              world_size, ").");
  TORCH_CHECK(align >= 1 && total >= 0, "even_shard: align ", align, " and total ", total, " must be positive.");
  ShardInfo s;
  const int64_t per_rank = (total + world_size - 1) / world_size;  // ceil(total / N)
  s.size = (per_rank + align - 1) / align * align;                 // rounded up to align
  s.offset = rank * s.size;                                        // rank r owns [r·size, (r+1)·size)
  s.padded_total = s.size * world_size;
  return s;
}

// ---------------------------------------------------------------- construction

ShardedOptimizer::ShardedOptimizer(std::vector<torch::optim::OptimizerParamGroup> groups, OptimizerFactory factory,
                                   Group group, ZeroMode mode)
    : factory_(std::move(factory)), group_(std::move(group)), mode_(mode), load_(group_.world_size, 0) {
  TORCH_CHECK(group_.backend, "ShardedOptimizer: the group has no backend; build it with make_group().");
  // The wrapped optimizer starts empty and receives this rank's shard group by group.
  local_ = factory_({});
  TORCH_CHECK(local_, "ShardedOptimizer: the optimizer factory returned null.");
  for (const auto& g : groups) add_group(g);
}

void ShardedOptimizer::add_param_group(const torch::optim::OptimizerParamGroup& group) { add_group(group); }

void ShardedOptimizer::add_group(const torch::optim::OptimizerParamGroup& g) {
  auto options = [&] { return g.has_options() ? g.options().clone() : local_->defaults().clone(); };
  const auto& ps = g.params();
  TORCH_CHECK(!ps.empty(), "ShardedOptimizer: a parameter group is empty; pass at least one tensor.");
  for (size_t k = 0; k < ps.size(); ++k) {
    TORCH_CHECK(ps[k].device().type() == group_.device.type(), "ShardedOptimizer: parameter ", params_.size() + k,
                " is on ", ps[k].device(), " but the ", backend_name(group_.kind), " group works on ",
                group_.device.type(), " tensors; move the model or pick the other backend.");
    TORCH_CHECK(ps[k].is_contiguous(), "ShardedOptimizer: parameter ", params_.size() + k,
                " is not contiguous; collectives need dense tensors. Make it contiguous when building the model.");
  }
  if (mode_ == ZeroMode::BroadcastOwners) {
    std::vector<int64_t> bytes;
    for (const auto& p : ps) bytes.push_back(p.numel() * static_cast<int64_t>(p.element_size()));
    auto owners = owner_by_size(bytes, load_);
    std::vector<at::Tensor> mine;
    for (size_t k = 0; k < ps.size(); ++k)
      if (owners[k] == group_.rank) mine.push_back(ps[k]);
    owners_.insert(owners_.end(), owners.begin(), owners.end());
    params_.insert(params_.end(), ps.begin(), ps.end());
    if (!mine.empty()) local_->add_param_group(torch::optim::OptimizerParamGroup(mine, options()));
    return;
  }

  // Mode 2: re-point the group's parameters into one flat buffer (as .data = ... would), so the
  // all-gather writes every parameter in place and the optimizer can update a slice of it.
  FlatGroup fg;
  fg.params = ps;
  int64_t total = 0;
  for (const auto& p : ps) {
    TORCH_CHECK(p.scalar_type() == ps[0].scalar_type() && p.device() == ps[0].device(),
                "ShardedOptimizer (mode 2): a parameter group mixes ", ps[0].scalar_type(), " on ", ps[0].device(),
                " with ", p.scalar_type(), " on ", p.device(), "; put each dtype/device in its own group.");
    total += p.numel();
  }
  fg.shard = even_shard(total, group_.world_size, group_.rank);
  const auto opts = ps[0].options().requires_grad(false);
  fg.flat_params = at::zeros({fg.shard.padded_total}, opts);
  fg.flat_grads = at::zeros({fg.shard.padded_total}, opts);
  {
    c10::NoGradGuard no_grad;
    int64_t off = 0;
    for (auto p : ps) {  // copies of the handle; set_data changes the shared TensorImpl
      at::Tensor slot = fg.flat_params.narrow(0, off, p.numel()).view(p.sizes());
      slot.copy_(p);
      p.set_data(slot);
      p.mutable_grad() = flat_view(fg.flat_grads, off, p.sizes());
      off += p.numel();
    }
  }
  fg.shard_param = fg.flat_params.narrow(0, fg.shard.offset, fg.shard.size);
  // The shard's gradient has its own buffer (1/N of the parameters): the reduce-scatter output
  // must not alias its input on every backend.
  fg.shard_param.mutable_grad() = at::zeros({fg.shard.size}, opts);
  local_->add_param_group(torch::optim::OptimizerParamGroup({fg.shard_param}, options()));
  params_.insert(params_.end(), ps.begin(), ps.end());
  flat_.push_back(std::move(fg));
}

// ---------------------------------------------------------------- step

void ShardedOptimizer::step() {
  if (mode_ == ZeroMode::BroadcastOwners)
    step_broadcast_owners();
  else
    step_reduce_scatter();
}

void ShardedOptimizer::step_broadcast_owners() {
  local_->step();
  c10::NoGradGuard no_grad;
  // All broadcasts are queued before any wait: NCCL runs them back to back on its stream.
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (size_t i = 0; i < params_.size(); ++i) {
    std::vector<at::Tensor> t{params_[i]};
    c10d::BroadcastOptions from_owner;
    from_owner.rootRank = owners_[i];
    works.push_back(group_.backend->broadcast(t, from_owner));
  }
  for (auto& w : works) wait_explained(w, group_, "zero1", "broadcast of updated parameters from their owners", -1);
}

void ShardedOptimizer::step_reduce_scatter() {
  c10::NoGradGuard no_grad;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (auto& fg : flat_) {
    int64_t off = 0;
    for (auto& p : fg.params) {
      at::Tensor view = flat_view(fg.flat_grads, off, p.sizes());
      at::Tensor& grad = p.mutable_grad();
      if (!grad.defined())
        view.zero_();
      else if (!(grad.is_alias_of(view) && grad.data_ptr() == view.data_ptr()))
        view.copy_(grad);
      grad = view;
      off += p.numel();
    }
    at::Tensor out = fg.shard_param.mutable_grad();
    works.push_back(group_.backend->_reduce_scatter_base(out, fg.flat_grads));
  }
  for (size_t g = 0; g < flat_.size(); ++g) {
    wait_explained(works[g], group_, "zero1", "reduce-scatter of gradient group " + std::to_string(g), -1);
    flat_[g].shard_param.mutable_grad().div_(group_.world_size);
  }
  local_->step();
  works.clear();
  for (auto& fg : flat_) {
    // In place: this rank's input is its own slice of the output buffer.
    works.push_back(group_.backend->_allgather_base(fg.flat_params, fg.shard_param));
  }
  for (auto& w : works) wait_explained(w, group_, "zero1", "all-gather of updated parameters", -1);
}

void ShardedOptimizer::zero_grad(bool set_to_none) {
  c10::NoGradGuard no_grad;
  if (mode_ == ZeroMode::ReduceScatter && !set_to_none) {
    for (auto& fg : flat_) {
      fg.flat_grads.zero_();
      int64_t off = 0;
      for (auto& p : fg.params) {
        p.mutable_grad() = flat_view(fg.flat_grads, off, p.sizes());
        off += p.numel();
      }
    }
    return;
  }
  for (auto& p : params_) {
    if (set_to_none)
      p.mutable_grad().reset();
    else if (p.grad().defined())
      p.mutable_grad().zero_();
  }
}

int64_t ShardedOptimizer::state_bytes() const {
  int64_t bytes = 0;
  auto add = [&](const at::Tensor& t) {
    if (t.defined()) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  };
  for (const auto& [key, state] : local_->state()) {
    if (auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(state.get())) {
      add(s->exp_avg());
      add(s->exp_avg_sq());
      add(s->max_exp_avg_sq());
    } else if (auto* s = dynamic_cast<const torch::optim::AdamParamState*>(state.get())) {
      add(s->exp_avg());
      add(s->exp_avg_sq());
      add(s->max_exp_avg_sq());
    } else if (auto* s = dynamic_cast<const torch::optim::SGDParamState*>(state.get())) {
      add(s->momentum_buffer());
    }
  }
  return bytes;
}

}  // namespace lmscale::distributed
