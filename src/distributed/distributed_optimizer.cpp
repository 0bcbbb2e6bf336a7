// The distributed optimizer; see distributed_optimizer.h.
//
// Note [distributed optimizer layout]
// Parameters are grouped into buckets as DDP groups them (bucketing.h: reverse model order, a cap, an
// optional small first bucket), with two changes. (1) Parameters whose storages are adjacent row
// blocks of one tensor (the packed q, k, v weights) form one unit that is never split, and inside a
// bucket parameters sit in ascending model order, so the unit stays one [3C, C] block in every flat
// buffer and the fused QKV GEMM still reads (and its weight-gradient GEMM writes) one operand.
// (2) Parameters with a bf16 copy (the Linear weights) and those without (embedding, norms) go to
// separate buckets, the copy buckets first: a copy bucket all-gathers its bf16 copies (the fp32
// masters outside this rank's shard are then stale, and nothing reads them), the others their fp32
// values, which the forward reads directly.
// Each bucket holds padded_total = N · slice elements (even_shard: 16-element aligned slices, the
// padding zero) in three flat buffers of one layout: fp32 parameters, bf16 copies, gradients in the
// communication dtype. Rank r owns [r·slice, (r+1)·slice) of each: the reduce-scatter of the
// gradients lands on the slice of parameters this rank updates, and the all-gather writes every
// parameter (or copy) in place. Gradients are summed by the collective and divided by N on the shard,
// the rounding of DDP's average; AdamW is elementwise, so in fp32 the sharded update is bit-identical
// to the unsharded one (tests/cpp/distributed/distributed_optimizer_test.cpp).
#include "distributed/distributed_optimizer.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>

#include <algorithm>

#include "distributed/broadcast.h"
#include "distributed/fault.h"

namespace lmscale::distributed {

ShardLayout parse_shard_layout(const std::string& name) {
  if (name == "zero1") return ShardLayout::Zero1;
  if (name == "zero2") return ShardLayout::Zero2;
  TORCH_CHECK(false, "sharding layout '", name, "' is not one of: zero1, zero2");
}

std::string shard_layout_name(ShardLayout l) { return l == ShardLayout::Zero1 ? "zero1" : "zero2"; }

namespace {

// Whether b's storage continues a's rows: same storage and dtype, b starting where a ends.
bool continues(const at::Tensor& a, const at::Tensor& b) {
  return a.is_contiguous() && b.is_contiguous() && a.scalar_type() == b.scalar_type() && a.dim() == 2 && b.dim() == 2 &&
         a.size(1) == b.size(1) && a.storage().is_alias_of(b.storage()) &&
         b.storage_offset() == a.storage_offset() + a.numel();
}

// Buckets over units of parameters (Note [distributed optimizer layout]): the units of `group` are
// assigned as DDP assigns tensors, then expanded into ascending parameter indices.
std::vector<std::vector<size_t>> assign_units(const std::vector<std::vector<size_t>>& units,
                                              const std::vector<at::Tensor>& params, const std::vector<bool>& in_group,
                                              int64_t cap, int64_t first_cap) {
  std::vector<TensorInfo> infos;
  for (const auto& u : units) {
    TensorInfo t;
    t.numel = 0;
    for (size_t i : u) t.numel += params[i].numel();
    t.dtype = params[u.front()].scalar_type();
    t.device = params[u.front()].device();
    t.included = in_group[u.front()];
    infos.push_back(t);
  }
  std::vector<std::vector<size_t>> buckets;
  for (const auto& unit_bucket : assign_buckets(infos, cap, /*reverse_order=*/true, first_cap)) {
    std::vector<size_t> b;
    for (size_t u : unit_bucket) b.insert(b.end(), units[u].begin(), units[u].end());
    std::sort(b.begin(), b.end());
    buckets.push_back(std::move(b));
  }
  return buckets;
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(std::vector<at::Tensor> params, std::vector<at::Tensor> copies,
                                           std::vector<at::Tensor> buffers, Group group,
                                           DistributedOptimizerOptions options)
    : group_(std::move(group)), options_(options) {
  TORCH_CHECK(group_.backend, "distributed optimizer: the group has no backend; build it with make_group().");
  TORCH_CHECK(copies.empty() || copies.size() == params.size(), "distributed optimizer: ", copies.size(),
              " bf16 copies for ", params.size(), " parameters; pass one per parameter (undefined where none) or none.");
  params_ = unique_tensors(params);
  for (size_t i = 0; i < params_.size(); ++i) index_of_[params_[i].unsafeGetTensorImpl()] = i;
  std::vector<at::Tensor> copy_of(params_.size());
  for (size_t j = 0; j < copies.size(); ++j)
    if (copies[j].defined()) copy_of[index_of_.at(params[j].unsafeGetTensorImpl())] = copies[j];
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    TORCH_CHECK(p.defined() && p.device() == group_.device, "distributed optimizer: parameter ", i, " is on ",
                p.defined() ? p.device().str() : "nothing", " but this rank works on ", group_.device,
                "; move the model there before wrapping it.");
    TORCH_CHECK(p.is_contiguous(), "distributed optimizer: parameter ", i, " is not contiguous.");
    TORCH_CHECK(!p.requires_grad() || p.scalar_type() == at::kFloat, "distributed optimizer: parameter ", i, " is ",
                p.scalar_type(), "; the fp32 master weights must be float32 (bf16 copies carry the rest).");
    const auto& c = copy_of[i];
    TORCH_CHECK(!c.defined() || (c.scalar_type() == at::kBFloat16 && c.sizes() == p.sizes() && c.is_contiguous()),
                "distributed optimizer: the copy of parameter ", i, " must be a contiguous bf16 tensor of its shape.");
  }
  const int64_t cap = bucket_cap_bytes(options_.bucket_mb);
  const int64_t first_cap =
      options_.first_bucket_mb >= 0 ? std::min(bucket_cap_bytes(options_.first_bucket_mb), cap) : -1;

  // Units: runs of parameters that are adjacent row blocks (packed q, k, v), with and without copies.
  std::vector<std::vector<size_t>> units;
  for (size_t i = 0; i < params_.size(); ++i) {
    const bool joins = !units.empty() && continues(params_[units.back().back()], params_[i]) &&
                       copy_of[i].defined() == copy_of[units.back().back()].defined() &&
                       params_[i].requires_grad() == params_[units.back().back()].requires_grad();
    if (joins) units.back().push_back(i);
    else units.push_back({i});
  }
  std::vector<bool> with_copy(params_.size()), without_copy(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    with_copy[i] = params_[i].requires_grad() && copy_of[i].defined();
    without_copy[i] = params_[i].requires_grad() && !copy_of[i].defined();
  }
  assignment_ = assign_units(units, params_, with_copy, cap, first_cap);
  const size_t n_copy_buckets = assignment_.size();
  for (auto& b : assign_units(units, params_, without_copy, cap, -1)) assignment_.push_back(std::move(b));
  schedule_.assign(assignment_, params_.size());

  bucket_of_.assign(params_.size(), SIZE_MAX);
  slot_of_.assign(params_.size(), SIZE_MAX);
  const at::ScalarType comm = options_.comm_dtype == CommDtype::Bf16 ? at::kBFloat16 : at::kFloat;
  std::vector<at::Tensor> to_broadcast;
  std::vector<at::Tensor> shards, shard_copies;
  c10::NoGradGuard no_grad;
  for (size_t b = 0; b < assignment_.size(); ++b) {
    Bucket bucket;
    bucket.variables = assignment_[b];
    BucketLayout layout = bucket_layout(params_, bucket.variables);
    bucket.offsets = std::move(layout.offsets);
    bucket.shard = even_shard(layout.total, group_.world_size, group_.rank);
    bucket.gathers_copies = b < n_copy_buckets;
    const auto opts = params_[bucket.variables.front()].options().requires_grad(false);
    bucket.flat_params = at::zeros({bucket.shard.padded_total}, opts);
    if (bucket.gathers_copies) bucket.flat_copies = at::zeros({bucket.shard.padded_total}, opts.dtype(at::kBFloat16));
    for (size_t k = 0; k < bucket.variables.size(); ++k) {
      const size_t i = bucket.variables[k];
      bucket_of_[i] = b;
      slot_of_[i] = k;
      at::Tensor p = params_[i];  // a handle: set_data changes the shared TensorImpl, keeps its version counter
      at::Tensor place = bucket.flat_params.narrow(0, bucket.offsets[k], p.numel()).view(p.sizes());
      place.copy_(p);
      p.set_data(place);
      p.mutable_grad().reset();
      if (bucket.gathers_copies) {
        at::Tensor c = copy_of[i];
        c.set_data(bucket.flat_copies.narrow(0, bucket.offsets[k], p.numel()).view(p.sizes()));
      }
    }
    bucket.shard_param = bucket.flat_params.narrow(0, bucket.shard.offset, bucket.shard.size);
    bucket.shard_param.mutable_grad() = at::zeros({bucket.shard.size}, opts);
    bucket.shard_grad_comm = comm == at::kFloat ? bucket.shard_param.grad()
                                                : at::zeros({bucket.shard.size}, opts.dtype(comm));
    // ZeRO-2 passes the buckets that fill in backward order through the ring (Note [ZeRO-2 gradient ring]):
    // the copy buckets when there are any; the embedding's and norms' bucket beside them fills from the first to
    // the last moment of backward, and is small. Every other buffer persists.
    bucket.in_ring = options_.layout == ShardLayout::Zero2 && (bucket.gathers_copies || n_copy_buckets == 0);
    if (!bucket.in_ring) bucket.grads = at::zeros({bucket.shard.padded_total}, opts.dtype(comm));
    to_broadcast.push_back(bucket.flat_params);
    shards.push_back(bucket.shard_param);
    shard_copies.push_back(bucket.gathers_copies ? bucket.flat_copies.narrow(0, bucket.shard.offset, bucket.shard.size)
                                                 : at::Tensor());
    buckets_.push_back(std::move(bucket));
  }
  if (options_.layout == ShardLayout::Zero2 && options_.grad_ring_slots > 0) {
    // Note [ZeRO-2 gradient ring]: the ring buckets' gradients go through grad_ring_slots reusable buffers, in
    // bucket order, instead of one caching-allocator block per bucket per step: a freed block that NCCL still
    // reads cannot serve the backward's next allocations, which then wait or grow the pool. A slot holds a
    // bucket of the cap; a bucket past it (one tensor larger than the cap) takes a buffer of its own each step,
    // so the ring stays k caps whatever the model. The r-th ring bucket takes slot r mod k once the (r-k)-th
    // one's reduce-scatter is sent; the stream writing into it first waits for that reduce-scatter (a stream
    // wait). DeepSpeed's ZeRO-2 double-buffers its gradient buckets likewise.
    int64_t slot = 0;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      Bucket& bucket = buckets_[b];
      const int64_t param_bytes = (bucket.offsets.back() + params_[bucket.variables.back()].numel()) *
                                  params_[bucket.variables.back()].element_size();
      if (!bucket.in_ring || param_bytes > std::max<int64_t>(cap, 0) || cap == kUnlimitedBucketBytes) continue;
      bucket.ring_position = static_cast<int64_t>(ring_order_.size());
      ring_order_.push_back(b);
      slot = std::max(slot, bucket.shard.padded_total);
    }
    if (!ring_order_.empty())
      for (size_t k = 0; k < options_.grad_ring_slots; ++k)
        ring_.push_back(at::empty({slot}, params_.front().options().requires_grad(false).dtype(comm)));
  }
  launched_.assign(buckets_.size(), false);
  for (const auto& p : params_)
    if (!p.requires_grad()) to_broadcast.push_back(p);
  to_broadcast.insert(to_broadcast.end(), buffers.begin(), buffers.end());
  broadcast_from_rank0(group_, to_broadcast);
  for (auto& b : buckets_)
    if (b.gathers_copies) b.flat_copies.copy_(b.flat_params);  // the copies of rank 0's weights
  local_ = std::make_unique<FusedAdamW>(shards, options_.adamw, options_.use_kernel);
  local_->set_bf16_copies(shard_copies);
  hooks_.add(params_, [this](size_t i) {
    // A weight the GEMM wrote into its slot still passes through autograd's accumulator, with no
    // gradient: it is ready already.
    if (!params_[i].grad().defined()) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (schedule_.is_ready(i)) return;
    }
    take_autograd_grad(i);
  });
  reset_step();
}

DistributedOptimizer::~DistributedOptimizer() {
  hooks_.remove();
  for (auto& b : buckets_) {
    wait_quietly(b.reduce);
    wait_quietly(b.gather);
  }
}

void DistributedOptimizer::take_autograd_grad(size_t i) {
  // Autograd's .grad (a parameter the GEMMs did not write: norms, embedding, an FP8 Linear) goes into
  // its slot in the communication dtype and is dropped; none (unused in this step) counts as zero.
  at::Tensor& grad = params_[i].mutable_grad();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Bucket& b = buckets_[bucket_of_[i]];
    at::Tensor dst = bucket_grads(b).narrow(0, b.offsets[slot_of_[i]], params_[i].numel());
    c10::NoGradGuard no_grad;
    if (grad.defined()) dst.view(params_[i].sizes()).copy_(grad);
    else dst.zero_();
  }
  grad.reset();
  mark_variable_ready(i);
}

at::Tensor& DistributedOptimizer::bucket_grads(Bucket& b) {
  if (!b.grads.defined()) {  // ZeRO-2: this step's buffer, taken at the bucket's first gradient
    const size_t k = ring_.size();
    const int64_t r = b.ring_position;
    const size_t before = r >= static_cast<int64_t>(k) ? ring_order_[static_cast<size_t>(r) - k] : SIZE_MAX;
    if (r >= 0 && (before == SIZE_MAX || launched_[before])) {
      // The slot's last bucket has been sent: the writes that follow wait for its reduce-scatter.
      if (before != SIZE_MAX && buckets_[before].reduce) buckets_[before].reduce->wait();
      b.grads = ring_[static_cast<size_t>(r) % k].narrow(0, 0, b.shard.padded_total);
    } else {
      // Past the cap, no ring, or out of order (the slot's bucket still filling): a buffer of its own.
      b.grads = at::empty({b.shard.padded_total}, b.shard_grad_comm.options());
    }
    const int64_t end = b.offsets.back() + params_[b.variables.back()].numel();
    if (end < b.shard.padded_total) b.grads.narrow(0, end, b.shard.padded_total - end).zero_();
  }
  return b.grads;
}

at::Tensor DistributedOptimizer::slot(const at::Tensor& weight) {
  auto it = index_of_.find(weight.unsafeGetTensorImpl());
  if (it == index_of_.end() || !params_[it->second].requires_grad()) return {};
  const size_t i = it->second;
  std::lock_guard<std::mutex> lock(mutex_);
  Bucket& b = buckets_[bucket_of_[i]];
  return bucket_grads(b).narrow(0, b.offsets[slot_of_[i]], weight.numel()).view(weight.sizes());
}

void DistributedOptimizer::written(const at::Tensor& weight) {
  const size_t i = index_of_.at(weight.unsafeGetTensorImpl());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++written_in_place_;
  }
  mark_variable_ready(i);
}

void DistributedOptimizer::mark_variable_ready(size_t i) {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(!schedule_.is_ready(i), "distributed optimizer (rank ", group_.rank, "): parameter ", i, " of shape ",
              params_[i].sizes(), " received its gradient twice in one step: call step() after every backward; "
              "gradient accumulation over several backwards is not supported.");
  if (schedule_.mark_ready(i)) launch_ready_buckets_in_order();
}

void DistributedOptimizer::launch_ready_buckets_in_order() {
  c10::NoGradGuard no_grad;
  // In index order on every rank: the collectives must match across ranks.
  schedule_.launch_ready_in_order([this](size_t index) {
    Bucket& b = buckets_[index];
    b.reduce = group_.backend->_reduce_scatter_base(b.shard_grad_comm, bucket_grads(b));
    launched_[index] = true;
    // ZeRO-2: the full-size gradients are not kept (a ring slot goes to a later bucket; a buffer of its own is
    // held by the collective until it is done).
    if (b.in_ring) b.grads = at::Tensor();
    if (!in_finish_) ++launched_during_backward_;
  });
}

void DistributedOptimizer::finish_gradient_synchronization() {
  in_finish_ = true;
  // A parameter backward did not reach contributes zero (the hook zeroes its slot).
  schedule_.mark_remaining(params_, [this](size_t i) { take_autograd_grad(i); }, "distributed optimizer");
  in_finish_ = false;
  publish_progress(group_, "distributed optimizer", steps_done_);
  c10::NoGradGuard no_grad;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    auto work = std::move(buckets_[b].reduce);
    wait_explained(work, group_, "distributed optimizer",
                   "reduce-scatter of bucket " + std::to_string(b) + " of " + std::to_string(buckets_.size()),
                   steps_done_);
    at::Tensor& g = buckets_[b].shard_param.mutable_grad();
    if (!buckets_[b].shard_grad_comm.is_same(g)) g.copy_(buckets_[b].shard_grad_comm);
    g.div_(group_.world_size);  // sum, then divide: the rounding of an average of unsharded gradients
  }
  finished_ = true;
}

void DistributedOptimizer::step() {
  if (!finished_) finish_gradient_synchronization();
  wait_for_all();  // the last step's all-gathers, if a forward did not wait for them
  local_->step();
  c10::NoGradGuard no_grad;
  if (!local_->ran_kernel())  // ATen's AdamW (CPU, or the kernel off) leaves the copies to us
    for (auto& b : buckets_)
      if (b.gathers_copies) b.flat_copies.narrow(0, b.shard.offset, b.shard.size).copy_(b.shard_param);
  // In the order the next forward reads them: embedding and norms (the buckets without copies), then
  // the copy buckets from the first block's (the last index) to the head's.
  std::vector<size_t> order;
  for (size_t b = buckets_.size(); b-- > 0;)
    if (!buckets_[b].gathers_copies) order.push_back(b);
  for (size_t b = buckets_.size(); b-- > 0;)
    if (buckets_[b].gathers_copies) order.push_back(b);
  for (size_t b : order) {
    Bucket& bucket = buckets_[b];
    at::Tensor& out = bucket.gathers_copies ? bucket.flat_copies : bucket.flat_params;
    at::Tensor mine = out.narrow(0, bucket.shard.offset, bucket.shard.size);
    bucket.gather = group_.backend->_allgather_base(out, mine);
  }
  ++steps_done_;
  reset_step();
}

void DistributedOptimizer::wait_for(const std::vector<at::Tensor>& tensors) {
  for (const auto& t : tensors) {
    auto it = index_of_.find(t.unsafeGetTensorImpl());
    if (it == index_of_.end() || bucket_of_[it->second] == SIZE_MAX) continue;
    auto& work = buckets_[bucket_of_[it->second]].gather;
    if (!work) continue;
    const size_t b = bucket_of_[it->second];
    wait_explained(work, group_, "distributed optimizer",
                   "all-gather of bucket " + std::to_string(b) + " of " + std::to_string(buckets_.size()), steps_done_);
    work.reset();
  }
}

void DistributedOptimizer::wait_for_all() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (!buckets_[b].gather) continue;
    wait_explained(buckets_[b].gather, group_, "distributed optimizer",
                   "all-gather of bucket " + std::to_string(b) + " of " + std::to_string(buckets_.size()), steps_done_);
    buckets_[b].gather.reset();
  }
}

void DistributedOptimizer::zero_grad() {
  for (auto& p : params_)
    if (p.grad().defined()) p.mutable_grad().reset();
}

void DistributedOptimizer::reset_step() {
  schedule_.start_step();
  std::fill(launched_.begin(), launched_.end(), false);
  finished_ = false;
  last_launched_during_backward_ = launched_during_backward_;
  launched_during_backward_ = 0;
  last_written_in_place_ = written_in_place_;
  written_in_place_ = 0;
}

int64_t DistributedOptimizer::grad_bytes() const {
  int64_t bytes = 0;
  for (const auto& b : buckets_) {
    bytes += b.shard_param.grad().numel() * b.shard_param.grad().element_size();
    if (!b.shard_grad_comm.is_same(b.shard_param.grad()))
      bytes += b.shard_grad_comm.numel() * b.shard_grad_comm.element_size();
    if (b.grads.defined()) bytes += b.grads.numel() * b.grads.element_size();
  }
  return bytes + ring_bytes();
}

int64_t DistributedOptimizer::ring_bytes() const {
  int64_t bytes = 0;
  for (const auto& r : ring_) bytes += r.numel() * r.element_size();
  return bytes;
}

int64_t DistributedOptimizer::payload_bytes_per_step() const {
  int64_t bytes = 0;
  for (const auto& b : buckets_) {
    bytes += b.shard.padded_total * b.shard_grad_comm.element_size();
    bytes += b.shard.padded_total * (b.gathers_copies ? 2 : 4);
  }
  return bytes;
}

}  // namespace lmscale::distributed
