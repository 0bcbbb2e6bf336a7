// DistributedDataParallel: verification and broadcast at construction, bucket buffers with
// gradients as views into them, post-accumulate-grad hooks that mark readiness, in-order bucket
// launch, and finish (wait, then reset for the next step).
//
// Note [DDP policies]
// All four strategies run the same code: assignment (assign_buckets with a cap), marking
// (mark_variable_ready counts the gradient in the BucketSchedule, shared with ZeRO-2; buckets launch
// strictly in index order, so every rank issues the same sequence of collectives) and
// communication (comm_hook_).
// They differ in two knobs only:
//   strategy   cap                 who marks
//   naive      0 (one param each)  finish, after backward
//   flat       unlimited           finish, after backward
//   overlap    0 (one param each)  the post-accumulate-grad hook, during backward
//   bucketed   bucket_mb           the post-accumulate-grad hook, during backward
// Gradients are views into the bucket buffers (PyTorch's gradient_as_bucket_view), so after
// zero_grad() backward accumulates straight into the buffer and no copy happens. If something set
// .grad to a fresh tensor (an optimizer's zero_grad with set_to_none), marking copies it into the
// bucket once and re-points .grad at the view.
#include "distributed/ddp.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/variable.h>

#include <sstream>

#include "distributed/broadcast.h"
#include "distributed/bucket_schedule.h"
#include "distributed/fault.h"
#include "distributed/flat_view.h"
#include "distributed/ready_hook.h"
#include "distributed/then_work.h"

namespace lmscale::distributed {
namespace {

constexpr int64_t kMaxDims = 8;
constexpr int64_t kSlotsPerTensor = 3 + kMaxDims;  // kind (0 frozen, 1 trainable, 2 buffer), dtype, ndim, dims

std::string describe_slots(const int64_t* s) {
  std::ostringstream os;
  const char* kinds[] = {"frozen parameter", "parameter", "buffer"};
  os << (s[0] >= 0 && s[0] <= 2 ? kinds[s[0]] : "?") << " "
     << c10::toString(static_cast<c10::ScalarType>(s[1])) << " [";
  for (int64_t d = 0; d < s[2] && d < kMaxDims; ++d) os << (d ? ", " : "") << s[3 + d];
  os << "]";
  return os.str();
}

// Bytes per bucket for a policy: 0 gives each parameter its own, kUnlimitedBucketBytes one for all.
int64_t bucket_cap_of(const DdpOptions& o) {
  switch (o.strategy) {
    case DdpStrategy::Naive:
    case DdpStrategy::Overlap: return 0;
    case DdpStrategy::Flat: return kUnlimitedBucketBytes;
    case DdpStrategy::Bucketed: return bucket_cap_bytes(o.bucket_mb);
  }
  TORCH_INTERNAL_ASSERT(false, "unhandled DDP strategy");
}

}  // namespace

DdpStrategy parse_ddp_strategy(const std::string& name) {
  if (name == "naive") return DdpStrategy::Naive;
  if (name == "flat") return DdpStrategy::Flat;
  if (name == "overlap" || name == "overlapped") return DdpStrategy::Overlap;
  if (name == "bucketed" || name == "bucket") return DdpStrategy::Bucketed;
  TORCH_CHECK(false, "DDP strategy '", name, "' is unknown; choose naive, flat, overlap or bucketed.");
  return DdpStrategy::Bucketed;
}

std::string ddp_strategy_name(DdpStrategy s) {
  switch (s) {
    case DdpStrategy::Naive: return "naive";
    case DdpStrategy::Flat: return "flat";
    case DdpStrategy::Overlap: return "overlap";
    case DdpStrategy::Bucketed: return "bucketed";
  }
  return "?";
}

CommDtype parse_comm_dtype(const std::string& name) {
  if (name == "fp32" || name == "float32") return CommDtype::Fp32;
  if (name == "bf16" || name == "bfloat16") return CommDtype::Bf16;
  TORCH_CHECK(false, "gradient communication dtype '", name, "' is unknown; choose fp32 or bf16.");
  return CommDtype::Fp32;
}

std::string comm_dtype_name(CommDtype d) { return d == CommDtype::Bf16 ? "bf16" : "fp32"; }

CommHook bf16_compress_hook(const Group& group) {
  // One bf16 copy per bucket, allocated on first use and reused: the hook runs on the autograd
  // thread during backward, where a fresh allocation per step would only add allocator traffic.
  auto copies = std::make_shared<std::vector<at::Tensor>>();
  return [backend = group.backend, copies](GradBucket& bucket) {
    if (copies->size() <= bucket.index) copies->resize(bucket.index + 1);
    at::Tensor& low = (*copies)[bucket.index];
    if (!low.defined() || low.numel() != bucket.buffer.numel())
      low = at::empty_like(bucket.buffer, bucket.buffer.options().dtype(at::kBFloat16));
    low.copy_(bucket.buffer);
    std::vector<at::Tensor> tensors{low};
    auto work = backend->allreduce(tensors, c10d::AllreduceOptions{});
    at::Tensor full = bucket.buffer;
    const int64_t divisor = bucket.divisor;
    // The sum of N bf16 values cannot overflow where fp32 would not (same exponent range); the
    // average is taken in fp32 after the cast back.
    return c10::intrusive_ptr<c10d::Work>(c10::make_intrusive<ThenWork>(work, [full, low, divisor]() mutable {
      full.copy_(low);
      full.div_(divisor);
    }));
  };
}

CommHook allreduce_average_hook(const Group& group) {
  // NCCL averages inside the collective (ReduceOp::AVG, NCCL's ncclAvg), which saves a pass over every
  // bucket (98 kernels per XL step at 100 MB buckets): the XL bf16 step on 2 H100s went from 113.9 / 116.1
  // to 106.9 / 109.4 ms (docs/results/runs/2026-11-26-8959ce7-distributed). Gloo has no average, so its buckets are
  // divided first.
  // A divisor other than the world size (a join that averages over the ranks still training) takes the
  // Gloo path on NCCL too; every rank of such a step has the same divisor, so all issue the same op.
  const bool nccl = group.kind == BackendKind::Nccl;
  return [backend = group.backend, world = group.world_size, nccl](GradBucket& bucket) {
    std::vector<at::Tensor> tensors{bucket.buffer};
    if (nccl && bucket.divisor == world) {
      c10d::AllreduceOptions opts;
      opts.reduceOp = c10d::ReduceOp::AVG;
      return backend->allreduce(tensors, opts);
    }
    // Divide first (as PyTorch DDP does): the sum of pre-divided gradients stays in range in fp16/bf16.
    bucket.buffer.div_(bucket.divisor);
    return backend->allreduce(tensors, c10d::AllreduceOptions{});
  };
}

DistributedDataParallel::DistributedDataParallel(std::vector<at::Tensor> params, std::vector<at::Tensor> buffers,
                                                 Group group, DdpOptions options)
    : group_(std::move(group)), options_(options) {
  TORCH_CHECK(group_.backend, "DDP: the group has no backend; build it with make_group().");
  divisor_ = group_.world_size;
  // Bad options fail here, on every rank alike, before the first collective.
  cap_bytes_ = bucket_cap_of(options_);
  if (options_.strategy == DdpStrategy::Bucketed && options_.first_bucket_mb >= 0)
    first_cap_bytes_ = std::min(bucket_cap_bytes(options_.first_bucket_mb), cap_bytes_);
  params_ = unique_tensors(params);
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    TORCH_CHECK(p.defined(), "DDP: parameter ", i, " is an undefined tensor; pass only real parameters.");
    check_on_group_device(p, "parameter", i);
    TORCH_CHECK(p.is_contiguous(), "DDP: parameter ", i, " of shape ", p.sizes(),
                " is not contiguous; its gradient cannot be a view into a bucket. Call .contiguous() on it "
                "when building the model.");
  }
  for (size_t i = 0; i < buffers.size(); ++i) check_on_group_device(buffers[i], "buffer", i);
  comm_hook_ = options_.comm_dtype == CommDtype::Bf16 ? bf16_compress_hook(group_) : allreduce_average_hook(group_);
  for (auto& p : params_)
    TORCH_CHECK(options_.comm_dtype == CommDtype::Fp32 || p.scalar_type() == at::kFloat || !p.requires_grad(),
                "DDP: bf16 gradient communication expects fp32 parameters (found ", p.scalar_type(),
                "); use --comm-dtype fp32 for parameters that are already low precision.");
  verify_across_ranks(buffers);
  std::vector<at::Tensor> to_broadcast = params_;
  to_broadcast.insert(to_broadcast.end(), buffers.begin(), buffers.end());
  broadcast_from_rank0(group_, to_broadcast);
  build_buckets(assign_buckets(bucket_infos(params_), cap_bytes_, /*reverse_order=*/true, first_cap_bytes_));
  if (options_.strategy == DdpStrategy::Overlap || options_.strategy == DdpStrategy::Bucketed)
    hooks_.add(params_, [this](size_t i) { mark_variable_ready(i); });
  reset_step();
}

// One device per process: the group's collectives run on group_.device, so a tensor elsewhere (another
// device type, or another GPU) could be neither broadcast nor reduced.
void DistributedDataParallel::check_on_group_device(const at::Tensor& t, const char* what, size_t i) const {
  if (t.device() == group_.device) return;
  TORCH_CHECK(t.device().type() == group_.device.type(), "DDP: ", what, " ", i, " is on ", t.device(), " but the ",
              backend_name(group_.kind), " group reduces tensors on ", group_.device.type(), ". Move the model to ",
              group_.device, " or use the ", group_.kind == BackendKind::Gloo ? "nccl" : "gloo", " backend.");
  TORCH_CHECK(false, "DDP: ", what, " ", i, " is on ", t.device(), " but this process reduces on ", group_.device,
              "; DDP takes one device per process. Move the whole model with .to(", group_.device,
              ") before wrapping it.");
}

DistributedDataParallel::~DistributedDataParallel() {
  hooks_.remove();
  for (auto& b : buckets_) wait_quietly(b.work);
}

// ---------------------------------------------------------------- agree before communicating

void DistributedDataParallel::verify_across_ranks(const std::vector<at::Tensor>& buffers) {
  std::vector<int64_t> sig{static_cast<int64_t>(params_.size()), static_cast<int64_t>(buffers.size())};
  auto add = [&](const at::Tensor& t, int64_t kind, size_t i) {
    TORCH_CHECK(t.dim() <= kMaxDims, "DDP: ", kind == 2 ? "buffer " : "parameter ", i, " has ", t.dim(),
                " dims; at most ", kMaxDims, " are supported. Reshape it.");
    sig.push_back(kind);
    sig.push_back(static_cast<int64_t>(t.scalar_type()));
    sig.push_back(t.dim());
    for (int64_t d = 0; d < kMaxDims; ++d) sig.push_back(d < t.dim() ? t.size(d) : -1);
  };
  for (size_t i = 0; i < params_.size(); ++i) add(params_[i], params_[i].requires_grad() ? 1 : 0, i);
  for (size_t i = 0; i < buffers.size(); ++i) add(buffers[i], 2, i);

  const auto opts = at::TensorOptions().dtype(at::kLong).device(group_.device);
  // Ranks may have different counts: agree on the longest signature first, pad the rest.
  at::Tensor len = at::full({1}, static_cast<int64_t>(sig.size()), opts);
  std::vector<at::Tensor> lv{len};
  c10d::AllreduceOptions max_op;
  max_op.reduceOp = c10d::ReduceOp::MAX;
  wait_explained(group_.backend->allreduce(lv, max_op), group_, "ddp set-up", "all-reduce of parameter-list lengths", -1);
  const int64_t max_len = len.cpu().item<int64_t>();
  std::vector<int64_t> padded = sig;
  padded.resize(static_cast<size_t>(max_len), -7);
  std::vector<at::Tensor> in{at::tensor(padded, at::kLong).to(group_.device)};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < group_.world_size; ++r) out[0].push_back(at::empty({max_len}, opts));
  wait_explained(group_.backend->allgather(out, in), group_, "ddp set-up", "all-gather of parameter shapes", -1);

  const at::Tensor ref = out[0][0].cpu();
  const int64_t* a = ref.data_ptr<int64_t>();
  for (int r = 1; r < group_.world_size; ++r) {
    const at::Tensor other = out[0][r].cpu();
    const int64_t* b = other.data_ptr<int64_t>();
    TORCH_CHECK(a[0] == b[0] && a[1] == b[1], "DDP: rank 0 passes ", a[0], " parameters and ", a[1],
                " buffers but rank ", r, " passes ", b[0], " and ", b[1],
                " (this is rank ", group_.rank, "). Every rank must wrap the same model: check the model "
                "config and that no rank adds or freezes parameters conditionally.");
    for (int64_t s = 2; s < max_len; ++s) {
      if (a[s] == b[s]) continue;
      const int64_t t = (s - 2) / kSlotsPerTensor;
      const bool is_param = t < a[0];
      const int64_t* sa = a + 2 + t * kSlotsPerTensor;
      const int64_t* sb = b + 2 + t * kSlotsPerTensor;
      TORCH_CHECK(false, "DDP: rank ", r, " disagrees with rank 0 on ", is_param ? "parameter " : "buffer ",
                  is_param ? t : t - a[0], ": rank 0 has a ", describe_slots(sa), ", rank ", r, " has a ",
                  describe_slots(sb), " (this is rank ", group_.rank, "). Every rank must build the same model "
                  "(same config and parameter order, same requires_grad flags) before wrapping it.");
    }
  }
}

// ---------------------------------------------------------------- assignment → buffers, hooks

void DistributedDataParallel::build_buckets(const std::vector<std::vector<size_t>>& assignment) {
  assignment_ = assignment;
  slots_.assign(params_.size(), Slot{});
  buckets_.clear();
  for (size_t b = 0; b < assignment_.size(); ++b) {
    Bucket bucket;
    bucket.variables = assignment_[b];
    BucketLayout layout = bucket_layout(params_, bucket.variables);
    bucket.offsets = std::move(layout.offsets);
    bucket.lengths = std::move(layout.lengths);
    const auto& first = params_[bucket.variables.front()];
    bucket.buffer = at::zeros({layout.total}, first.options().requires_grad(false));
    for (size_t k = 0; k < bucket.variables.size(); ++k) {
      const size_t i = bucket.variables[k];
      slots_[i].bucket = b;
      slots_[i].view = flat_view(bucket.buffer, bucket.offsets[k], params_[i].sizes());
    }
    buckets_.push_back(std::move(bucket));
  }
  schedule_.assign(assignment_, params_.size());
}

// Note [Ready-order rebuild]
// The first step's hooks record the order gradients became final on this rank. Autograd may order
// independent branches differently on different ranks, and buckets must be identical everywhere,
// so rank 0's order is broadcast and every rank rebuilds from it. The gradients of the step just
// finished (already averaged) are copied into the new buckets and .grad re-pointed, so the caller's
// optimizer step still sees them. Runs once, like PyTorch's Reducer::rebuild_buckets.
void DistributedDataParallel::rebuild_buckets_from_ready_order() {
  rebuilt_ = true;
  const auto& seen = step_.ready_order;
  const auto opts = at::TensorOptions().dtype(at::kLong).device(group_.device);
  // Slot k: the k-th ready parameter, -1 past the end (unused parameters keep reverse model order).
  std::vector<int64_t> order(params_.size(), -1);
  for (size_t k = 0; k < seen.size() && k < order.size(); ++k) order[k] = static_cast<int64_t>(seen[k]);
  at::Tensor t = at::tensor(order, at::kLong).to(opts.device());
  std::vector<at::Tensor> tv{t};
  c10d::BroadcastOptions root0;
  root0.rootRank = 0;
  wait_explained(group_.backend->broadcast(tv, root0), group_, "ddp", "broadcast of rank 0's gradient ready order",
                 steps_done_);
  t = t.cpu();
  std::vector<size_t> agreed;
  for (int64_t k = 0; k < t.numel(); ++k) {
    const int64_t i = t[k].item<int64_t>();
    if (i >= 0) agreed.push_back(static_cast<size_t>(i));
  }
  auto assignment = assign_buckets_in_order(bucket_infos(params_), agreed, cap_bytes_, first_cap_bytes_);
  if (assignment == assignment_) return;
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> grads(params_.size());
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].requires_grad()) grads[i] = slots_[i].view.clone();
  build_buckets(assignment);
  for (size_t i = 0; i < params_.size(); ++i)
    if (grads[i].defined()) {
      slots_[i].view.copy_(grads[i]);
      params_[i].mutable_grad() = slots_[i].view;
    }
}

// ---------------------------------------------------------------- marking

void DistributedDataParallel::mark_variable_ready(size_t i) {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(!schedule_.is_ready(i), "DDP (rank ", group_.rank, "): parameter ", i, " of shape ", params_[i].sizes(),
              " received its gradient twice in one step. Likely causes: backward ran twice before "
              "finish_gradient_synchronization() (call finish after every backward), or the parameter is "
              "used inside a reentrant checkpoint.");
  if (!in_finish_) step_.ready_order.push_back(i);
  c10::NoGradGuard no_grad;
  Slot& slot = slots_[i];
  at::Tensor& grad = params_[i].mutable_grad();
  if (!grad.defined()) {
    // Unused on this rank in this step: contributes zero, but the bucket still joins the collective
    // so that every rank issues the same sequence.
    slot.view.zero_();
  } else if (!(grad.is_alias_of(slot.view) && grad.data_ptr() == slot.view.data_ptr())) {
    slot.view.copy_(grad);
  }
  grad = slot.view;
  if (schedule_.mark_ready(i)) launch_ready_buckets_in_order();
}

void DistributedDataParallel::launch_ready_buckets_in_order() {
  // A bucket whose gradients are ready waits for every earlier bucket: all ranks then launch the
  // same collectives in the same order even if their backward passes finish buckets differently.
  schedule_.launch_ready_in_order([this](size_t index) {
    Bucket& b = buckets_[index];
    GradBucket bucket = handoff(index, b.buffer);
    b.work = run_comm_hook(bucket);
    step_.launch_order.push_back(index);
    if (!in_finish_) ++step_.launched_during_backward;
  });
}

// ---------------------------------------------------------------- finish

GradBucket DistributedDataParallel::handoff(size_t index, const at::Tensor& buffer) const {
  const Bucket& b = buckets_[index];
  GradBucket bucket;
  bucket.index = index;
  bucket.count = buckets_.size();
  bucket.step = steps_done_;
  bucket.divisor = divisor_;
  bucket.buffer = buffer;
  bucket.offsets = b.offsets;
  bucket.lengths = b.lengths;
  for (size_t i : b.variables) bucket.params.push_back(params_[i]);
  return bucket;
}

c10::intrusive_ptr<c10d::Work> DistributedDataParallel::run_comm_hook(GradBucket& bucket) {
  auto work = comm_hook_(bucket);
  TORCH_CHECK(work, "DDP: the comm hook returned no work handle for bucket ", bucket.index,
              "; a hook must return the Work of the collective it started.");
  return work;
}

// ---------------------------------------------------------------- finish

void DistributedDataParallel::wait_buckets(std::vector<c10::intrusive_ptr<c10d::Work>>& works) {
  const std::string kind = user_hook_                                  ? "the comm hook's reduction"
                           : options_.comm_dtype == CommDtype::Bf16 ? "bf16 all-reduce"
                                                                    : "all-reduce";
  try {
    for (size_t b = 0; b < works.size(); ++b) {
      wait_explained(works[b], group_, "ddp",
                     kind + " of bucket " + std::to_string(b) + " of " + std::to_string(works.size()) + " (" +
                         std::to_string(buckets_[b].variables.size()) + " parameters)",
                     steps_done_);
      works[b].reset();
    }
  } catch (...) {
    for (auto& w : works) w.reset();  // nothing left for the destructor to wait for
    throw;
  }
}

void DistributedDataParallel::rebuild_once() {
  const bool hooks = options_.strategy == DdpStrategy::Overlap || options_.strategy == DdpStrategy::Bucketed;
  if (hooks && options_.rebuild_from_ready_order && !rebuilt_) rebuild_buckets_from_ready_order();
}

void DistributedDataParallel::finish_gradient_synchronization() {
  in_finish_ = true;
  // Policies without hooks mark everything now; with hooks, only parameters that got no gradient
  // in this backward are still unmarked.
  schedule_.mark_remaining(params_, [this](size_t i) { mark_variable_ready(i); }, "DDP");
  publish_progress(group_, "ddp", steps_done_);
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (auto& b : buckets_) works.push_back(std::move(b.work));
  try {
    wait_buckets(works);
  } catch (...) {
    // Leave the object reusable: a fresh step.
    in_finish_ = false;
    reset_step();
    throw;
  }
  in_finish_ = false;
  rebuild_once();
  ++steps_done_;
  reset_step();
}

// Note [DDP join]
// A rank whose data ran out while the others train on (ddp.join() in Python) stays in the join loop
// and, for each synchronised backward of the others, calls shadow_gradient_synchronization: the same
// hook calls on buffers of the same sizes, in the same bucket order, so every collective the others
// start finds its match here. The buffers are zeros, so this rank adds nothing to the sum; what the
// sum is divided by (the world size, or the ranks still training) is the divisor every rank of the step
// agreed on (set_divisor). The rebuild after the first step is a broadcast too, so it is matched at the
// same point as in finish. Counting the step keeps the fault reports' step numbers in line.
void DistributedDataParallel::shadow_gradient_synchronization() {
  TORCH_CHECK(!in_finish_ && step_.ready_order.empty(), "DDP (rank ", group_.rank, "): a joined rank shadows the "
              "others' gradient synchronisation only between steps, but this rank has ", step_.ready_order.size(),
              " gradients of an unfinished backward. Run no forward or backward after the rank's last batch "
              "inside ddp.join().");
  publish_progress(group_, "ddp", steps_done_);
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    GradBucket bucket = handoff(b, at::zeros_like(buckets_[b].buffer));
    works.push_back(run_comm_hook(bucket));
  }
  wait_buckets(works);
  rebuild_once();
  ++steps_done_;
  reset_step();
}

void DistributedDataParallel::register_comm_hook(CommHook hook) {
  TORCH_CHECK(hook, "DDP: register_comm_hook got no hook.");
  TORCH_CHECK(!user_hook_, "DDP (rank ", group_.rank, "): register_comm_hook was called a second time; a "
              "communication hook can be registered only once (as with PyTorch's DDP). Make one hook that does "
              "both jobs, or wrap the model anew.");
  TORCH_CHECK(steps_done_ == 0 && step_.ready_order.empty(), "DDP (rank ", group_.rank, "): register_comm_hook "
              "after ", steps_done_ + (step_.ready_order.empty() ? 0 : 1), " synchronised backward pass(es); register "
              "the hook right after wrapping the model, before the first backward (as PyTorch's DDP requires), so "
              "that every step's buckets go through it.");
  comm_hook_ = std::move(hook);
  user_hook_ = true;
}

void DistributedDataParallel::set_divisor(int64_t divisor) {
  TORCH_CHECK(divisor >= 1 && divisor <= group_.world_size, "DDP: the gradient divisor must be between 1 and the "
              "world size ", group_.world_size, ", got ", divisor, ".");
  divisor_ = divisor;
}

int64_t DistributedDataParallel::payload_bytes_per_step() const {
  int64_t bytes = 0;
  const int64_t elem = options_.comm_dtype == CommDtype::Bf16 ? 2 : 0;
  for (const auto& b : buckets_) bytes += b.buffer.numel() * (elem ? elem : b.buffer.element_size());
  return bytes;
}

void DistributedDataParallel::zero_grad() {
  c10::NoGradGuard no_grad;
  for (auto& b : buckets_) b.buffer.zero_();
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].requires_grad()) params_[i].mutable_grad() = slots_[i].view;
}

void DistributedDataParallel::reset_step() {
  schedule_.start_step();
  last_step_ = std::move(step_);
  step_ = DdpStepStats{};
}

}  // namespace lmscale::distributed
