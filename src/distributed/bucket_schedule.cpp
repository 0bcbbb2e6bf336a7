// See bucket_schedule.h.
#include "distributed/bucket_schedule.h"

#include <c10/util/Exception.h>

#include <unordered_set>

namespace lmscale::distributed {

std::vector<at::Tensor> unique_tensors(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> once;
  std::unordered_set<const void*> seen;
  for (const auto& t : tensors)
    if (seen.insert(t.unsafeGetTensorImpl()).second) once.push_back(t);
  return once;
}

std::vector<TensorInfo> bucket_infos(const std::vector<at::Tensor>& params) {
  std::vector<TensorInfo> infos;
  infos.reserve(params.size());
  for (const auto& p : params) infos.push_back({p.numel(), p.scalar_type(), p.device(), p.requires_grad()});
  return infos;
}

BucketLayout bucket_layout(const std::vector<at::Tensor>& params, const std::vector<size_t>& variables) {
  BucketLayout layout;
  for (size_t i : variables) {
    layout.offsets.push_back(layout.total);
    layout.lengths.push_back(params[i].numel());
    layout.total += params[i].numel();
  }
  return layout;
}

void BucketSchedule::assign(const std::vector<std::vector<size_t>>& assignment, size_t num_params) {
  bucket_of_.assign(num_params, 0);
  sizes_.clear();
  for (size_t b = 0; b < assignment.size(); ++b) {
    for (size_t i : assignment[b]) bucket_of_[i] = b;
    sizes_.push_back(assignment[b].size());
  }
  start_step();
}

void BucketSchedule::start_step() {
  ready_.assign(bucket_of_.size(), false);
  pending_ = sizes_;
  next_ = 0;
}

bool BucketSchedule::mark_ready(size_t param) {
  ready_[param] = true;
  const size_t b = bucket_of_[param];
  TORCH_INTERNAL_ASSERT(pending_[b] > 0, "bucket ", b, " has no pending gradients left");
  return --pending_[b] == 0;
}

void BucketSchedule::check_all_launched(const char* owner) const {
  TORCH_INTERNAL_ASSERT(next_ == pending_.size(), "only ", next_, " of ", pending_.size(), " ", owner,
                        " buckets launched after marking every parameter");
}

}  // namespace lmscale::distributed
