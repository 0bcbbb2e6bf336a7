// Rank 0's values into every rank's tensors (DDP and ZeRO-2 construction): chunks of up to 64 MB,
// so many small tensors take few collectives and big ones bounded extra memory.
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

#include "distributed/process_group.h"

namespace lmscale::distributed {

// Collective; every rank passes tensors of the same shapes and dtypes in the same order.
void broadcast_from_rank0(const Group& group, const std::vector<at::Tensor>& tensors);

}  // namespace lmscale::distributed
