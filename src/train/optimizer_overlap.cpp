// AdamW on a side stream during backward; see optimizer_overlap.h.
#include "train/optimizer_overlap.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <optional>

#ifdef LMSCALE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace lmscale {

struct OptimizerOverlap::State {
  FusedAdamW* opt = nullptr;
  std::vector<std::vector<size_t>> buckets;  // parameter indices, in launch order
  std::vector<size_t> bucket_of;             // parameter index → bucket
  std::vector<size_t> pending;               // gradients still to come, per bucket
  std::vector<bool> launched;
  bool armed = false, keep_grads = false, on_cuda = false, carveout_set = false;
  int sm_carveout = 0;
  std::optional<int32_t> saved_carveout;
#ifdef LMSCALE_CUDA
  std::optional<c10::cuda::CUDAStream> side;
  at::cuda::CUDAEvent ready, done;  // reused: each record is followed by its wait before the next
#endif

  // Runs bucket b's update: on the side stream after the work queued so far on the current stream
  // (which produced the gradients), then drops or zeroes the gradients.
  void launch(size_t b) {
    launched[b] = true;
#ifdef LMSCALE_CUDA
    if (on_cuda) {
      auto compute = c10::cuda::getCurrentCUDAStream();
      ready.record(compute);
      ready.block(*side);
      c10::cuda::CUDAStreamGuard guard(*side);
      opt->step_params(buckets[b]);
      for (size_t i : buckets[b]) release_grad(i, /*side_stream_used=*/true);
      return;
    }
#endif
    opt->step_params(buckets[b]);
    for (size_t i : buckets[b]) release_grad(i, false);
  }

  void release_grad(size_t i, bool side_stream_used) {
    auto& grad = opt->params()[i].mutable_grad();
    if (!grad.defined()) return;
#ifdef LMSCALE_CUDA
    // The side stream reads the gradient after this returns: the allocator must not hand its memory
    // to the compute stream before that read is done.
    if (side_stream_used) c10::cuda::CUDACachingAllocator::recordStream(grad.storage().data_ptr(), *side);
#endif
    (void)side_stream_used;
    if (keep_grads) grad.zero_();
    else grad = at::Tensor();
  }
};

namespace {
class WhenGradIsFinal : public torch::autograd::PostAccumulateGradHook {
 public:
  WhenGradIsFinal(std::shared_ptr<OptimizerOverlap::State> s, size_t index) : s_(std::move(s)), index_(index) {}
  void operator()(const torch::autograd::Variable&) override {
    auto& s = *s_;
    if (!s.armed) return;
    const size_t b = s.bucket_of[index_];
    if (--s.pending[b] == 0 && !s.launched[b]) s.launch(b);
  }

 private:
  std::shared_ptr<OptimizerOverlap::State> s_;
  size_t index_;
};
}  // namespace

OptimizerOverlap::OptimizerOverlap(FusedAdamW& optimizer, int64_t bucket_bytes, int sm_carveout)
    : state_(std::make_shared<State>()) {
  TORCH_CHECK(bucket_bytes > 0, "OptimizerOverlap: bucket_bytes must be positive, got ", bucket_bytes);
  auto& s = *state_;
  s.opt = &optimizer;
  s.sm_carveout = sm_carveout;
  const auto& params = optimizer.params();
  TORCH_CHECK(!params.empty(), "OptimizerOverlap: the optimizer has no parameters");
  s.on_cuda = params.front().is_cuda();
  // Gradients become final roughly in reverse registration order (the LM head first, the embedding
  // last): buckets are consecutive runs of that order, each up to bucket_bytes.
  std::vector<size_t> current;
  int64_t bytes = 0;
  for (size_t k = params.size(); k-- > 0;) {
    const int64_t b = params[k].nbytes();
    if (!current.empty() && bytes + b > bucket_bytes) {
      s.buckets.push_back(std::move(current));
      current.clear();
      bytes = 0;
    }
    current.push_back(k);
    bytes += b;
  }
  s.buckets.push_back(std::move(current));
  s.bucket_of.assign(params.size(), 0);
  for (size_t b = 0; b < s.buckets.size(); ++b)
    for (size_t k : s.buckets[b]) s.bucket_of[k] = b;
#ifdef LMSCALE_CUDA
  if (s.on_cuda) s.side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, params.front().device().index());
#endif
  for (size_t i = 0; i < params.size(); ++i)
    torch::autograd::impl::set_post_acc_grad_hooks(params[i], std::make_unique<WhenGradIsFinal>(state_, i));
}

OptimizerOverlap::~OptimizerOverlap() { state_->armed = false; }

size_t OptimizerOverlap::bucket_count() const { return state_->buckets.size(); }

void OptimizerOverlap::begin_backward(bool keep_grads) {
  auto& s = *state_;
  s.opt->begin_step();
  s.pending.clear();
  for (const auto& b : s.buckets) s.pending.push_back(b.size());
  s.launched.assign(s.buckets.size(), false);
  s.keep_grads = keep_grads;
  s.armed = true;
  if (s.on_cuda && s.sm_carveout > 0) {
    s.saved_carveout = at::globalContext()._SMCarveout_EXPERIMENTAL();
    at::globalContext()._setSMCarveout_EXPERIMENTAL(s.sm_carveout);
    s.carveout_set = true;
  }
}

void OptimizerOverlap::finish_backward() {
  auto& s = *state_;
  for (size_t b = 0; b < s.buckets.size(); ++b)
    if (!s.launched[b]) s.launch(b);
#ifdef LMSCALE_CUDA
  if (s.on_cuda) {
    s.done.record(*s.side);
    s.done.block(c10::cuda::getCurrentCUDAStream());
  }
#endif
  abandon();
}

void OptimizerOverlap::abandon() {
  auto& s = *state_;
  s.armed = false;
  if (s.carveout_set) at::globalContext()._setSMCarveout_EXPERIMENTAL(s.saved_carveout);
  s.carveout_set = false;
}

}  // namespace lmscale
