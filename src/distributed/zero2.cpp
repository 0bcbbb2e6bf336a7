// ZeRO-2; see zero2.h.
//
// Note [ZeRO-2 layout]
// Buckets are assigned as in DDP (bucketing.h). Each bucket's trainable parameters are re-pointed
// into one flat buffer of padded_total = N · slice elements (even_shard: slices 16-element aligned,
// the padding stays zero), and rank r owns elements [r·slice, (r+1)·slice) of every bucket. So the
// reduce-scatter of a bucket's gradients lands exactly on the slice of parameters this rank
// updates, and the all-gather of the bucket's flat buffer writes every parameter in place.
// Gradients are produced fresh by backward (.grad is None between steps); when a bucket's last
// gradient is final its gradients are copied into a transient flat buffer, .grad is dropped, and
// the buffer is reduce-scattered and freed after the wait. Full-size gradients therefore live only
// from their creation until their bucket is sent, and between steps a rank holds 1/N of them
// (PyTorch's gradient_as_bucket_view would keep every bucket alive: DDP's choice, not ZeRO-2's).
// AdamW is elementwise, so the update on slices is bit-identical to the unsharded one.
#include "distributed/zero2.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>

#include "distributed/broadcast.h"
#include "distributed/bucket_schedule.h"
#include "distributed/fault.h"
#include "distributed/ready_hook.h"

namespace lmscale::distributed {

Zero2::Zero2(std::vector<at::Tensor> params, std::vector<at::Tensor> buffers, Group group,
             torch::optim::AdamWOptions adamw, Zero2Options options)
    : group_(std::move(group)), options_(options) {
  TORCH_CHECK(group_.backend, "ZeRO-2: the group has no backend; build it with make_group().");
  const int64_t cap = bucket_cap_bytes(options_.bucket_mb);
  const int64_t first_cap = options_.first_bucket_mb >= 0 ? std::min(bucket_cap_bytes(options_.first_bucket_mb), cap) : -1;
  params_ = unique_tensors(params);
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    TORCH_CHECK(p.defined() && p.device() == group_.device, "ZeRO-2: parameter ", i, " is on ",
                p.defined() ? p.device().str() : "nothing", " but this rank works on ", group_.device,
                "; move the model there before wrapping it.");
    TORCH_CHECK(p.is_contiguous(), "ZeRO-2: parameter ", i, " is not contiguous; make it contiguous when building "
                "the model.");
  }
  std::vector<at::Tensor> to_broadcast = params_;
  to_broadcast.insert(to_broadcast.end(), buffers.begin(), buffers.end());
  broadcast_from_rank0(group_, to_broadcast);

  assignment_ = assign_buckets(bucket_infos(params_), cap, /*reverse_order=*/true, first_cap);
  schedule_.assign(assignment_, params_.size());
  local_ = std::make_unique<torch::optim::AdamW>(std::vector<at::Tensor>{}, adamw);
  std::vector<at::Tensor> slices;
  c10::NoGradGuard no_grad;
  for (size_t b = 0; b < assignment_.size(); ++b) {
    Bucket bucket;
    bucket.variables = assignment_[b];
    BucketLayout layout = bucket_layout(params_, bucket.variables);
    bucket.offsets = std::move(layout.offsets);
    bucket.shard = even_shard(layout.total, group_.world_size, group_.rank);
    const auto& first = params_[bucket.variables.front()];
    bucket.flat_params = at::zeros({bucket.shard.padded_total}, first.options().requires_grad(false));
    for (size_t k = 0; k < bucket.variables.size(); ++k) {
      at::Tensor p = params_[bucket.variables[k]];  // a handle: set_data changes the shared TensorImpl
      at::Tensor slot = bucket.flat_params.narrow(0, bucket.offsets[k], p.numel()).view(p.sizes());
      slot.copy_(p);
      p.set_data(slot);
      p.mutable_grad().reset();
    }
    bucket.shard_param = bucket.flat_params.narrow(0, bucket.shard.offset, bucket.shard.size);
    bucket.shard_param.mutable_grad() = at::zeros({bucket.shard.size}, bucket.flat_params.options());
    slices.push_back(bucket.shard_param);
    buckets_.push_back(std::move(bucket));
  }
  if (!slices.empty()) local_->add_param_group(torch::optim::OptimizerParamGroup(slices, std::make_unique<torch::optim::AdamWOptions>(adamw)));
  hooks_.add(params_, [this](size_t i) { mark_variable_ready(i); });
  reset_step();
}

Zero2::~Zero2() {
  hooks_.remove();
  for (auto& b : buckets_) wait_quietly(b.work);
}

void Zero2::mark_variable_ready(size_t i) {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(!schedule_.is_ready(i), "ZeRO-2 (rank ", group_.rank, "): parameter ", i, " of shape ", params_[i].sizes(),
              " received its gradient twice in one step: call step() (or finish_gradient_synchronization) after "
              "every backward; gradient accumulation over several backwards is not supported.");
  if (schedule_.mark_ready(i)) launch_ready_buckets_in_order();
}

void Zero2::launch_ready_buckets_in_order() {
  c10::NoGradGuard no_grad;
  // In index order on every rank, as DDP: the collectives must match across ranks.
  schedule_.launch_ready_in_order([this](size_t index) {
    Bucket& b = buckets_[index];
    b.sending = at::empty({b.shard.padded_total}, b.flat_params.options());
    int64_t end = 0;
    for (size_t k = 0; k < b.variables.size(); ++k) {
      at::Tensor& p = params_[b.variables[k]];
      at::Tensor dst = b.sending.narrow(0, b.offsets[k], p.numel());
      at::Tensor& grad = p.mutable_grad();
      if (grad.defined())
        dst.view(p.sizes()).copy_(grad);
      else
        dst.zero_();  // unused on this rank in this step: contributes zero
      grad.reset();   // the full-size gradient is not kept: this rank keeps only its slice
      end = b.offsets[k] + p.numel();
    }
    if (end < b.shard.padded_total) b.sending.narrow(0, end, b.shard.padded_total - end).zero_();
    at::Tensor out = b.shard_param.mutable_grad();
    b.work = group_.backend->_reduce_scatter_base(out, b.sending);
    if (!in_finish_) ++launched_during_backward_;
  });
}

void Zero2::finish_gradient_synchronization() {
  in_finish_ = true;
  schedule_.mark_remaining(params_, [this](size_t i) { mark_variable_ready(i); }, "ZeRO-2");
  in_finish_ = false;
  publish_progress(group_, "zero2", steps_done_);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    auto work = std::move(buckets_[b].work);  // moved out: after a failure the destructor has less to wait on
    wait_explained(work, group_, "zero2",
                   "reduce-scatter of bucket " + std::to_string(b) + " of " + std::to_string(buckets_.size()),
                   steps_done_);
    buckets_[b].sending = at::Tensor();
    // Sum, then divide: the same rounding as averaging unsharded gradients.
    buckets_[b].shard_param.mutable_grad().div_(group_.world_size);
  }
  finished_ = true;
}

void Zero2::step() {
  if (!finished_) finish_gradient_synchronization();
  local_->step();
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  {
    c10::NoGradGuard no_grad;
    // In place: this rank's input is its own slice of the output buffer.
    for (auto& b : buckets_) works.push_back(group_.backend->_allgather_base(b.flat_params, b.shard_param));
  }
  for (size_t b = 0; b < works.size(); ++b)
    wait_explained(works[b], group_, "zero2",
                   "all-gather of parameter bucket " + std::to_string(b) + " of " + std::to_string(buckets_.size()),
                   steps_done_);
  ++steps_done_;
  reset_step();
}

void Zero2::zero_grad() {
  for (auto& p : params_)
    if (p.grad().defined()) p.mutable_grad().reset();
}

void Zero2::reset_step() {
  schedule_.start_step();
  finished_ = false;
  last_launched_during_backward_ = launched_during_backward_;
  launched_during_backward_ = 0;
}

int64_t Zero2::grad_bytes() const {
  int64_t bytes = 0;
  for (const auto& b : buckets_) bytes += b.shard_param.grad().numel() * b.shard_param.grad().element_size();
  for (const auto& p : params_)
    if (p.grad().defined()) bytes += p.grad().numel() * p.grad().element_size();
  return bytes;
}

int64_t Zero2::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& [key, state] : local_->state())
    if (auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(state.get()))
      for (const auto& t : {s->exp_avg(), s->exp_avg_sq(), s->max_exp_avg_sq()})
        if (t.defined()) bytes += t.numel() * t.element_size();
  return bytes;
}

int64_t Zero2::payload_bytes_per_step() const {
  int64_t bytes = 0;
  for (const auto& b : buckets_) bytes += 2 * b.flat_params.numel() * b.flat_params.element_size();
  return bytes;
}

}  // namespace lmscale::distributed
