// See broadcast.h.
#include "distributed/broadcast.h"

#include <ATen/ops/cat.h>
#include <c10/core/GradMode.h>

#include "distributed/bucketing.h"
#include "distributed/fault.h"

namespace lmscale::distributed {

void broadcast_from_rank0(const Group& group, const std::vector<at::Tensor>& tensors) {
  c10::NoGradGuard no_grad;
  std::vector<TensorInfo> infos;
  for (auto& t : tensors) infos.push_back({t.numel(), t.scalar_type(), t.device(), true});
  c10d::BroadcastOptions root0;
  root0.rootRank = 0;
  for (const auto& chunk : assign_buckets(infos, 64LL << 20, /*reverse_order=*/false)) {
    if (chunk.size() == 1 && tensors[chunk[0]].is_contiguous()) {
      std::vector<at::Tensor> one{tensors[chunk[0]]};
      wait_explained(group.backend->broadcast(one, root0), group, "set-up", "broadcast of rank 0's parameters", -1);
      continue;
    }
    std::vector<at::Tensor> flat_parts;
    for (size_t i : chunk) flat_parts.push_back(tensors[i].reshape({-1}));
    std::vector<at::Tensor> flat{at::cat(flat_parts)};
    wait_explained(group.backend->broadcast(flat, root0), group, "set-up", "broadcast of rank 0's parameters", -1);
    int64_t offset = 0;
    for (size_t i : chunk) {
      const at::Tensor& t = tensors[i];
      t.copy_(flat[0].narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

}  // namespace lmscale::distributed
