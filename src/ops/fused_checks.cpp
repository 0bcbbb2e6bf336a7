// The fused ops' shared input rules; see fused_checks.h.
#include "ops/fused_checks.h"

#include <c10/util/Exception.h>

namespace lmscale::ops {

void check_one_device(const char* op, std::initializer_list<std::pair<const char*, const at::Tensor*>> tensors) {
  const auto& [first_name, first] = *tensors.begin();
  for (const auto& [name, t] : tensors)
    TORCH_CHECK(!t->defined() || t->device() == first->device(), op,
                ": expected all tensors to be on the same device, but found at least two devices, ", first->device(),
                " (", first_name, ") and ", t->device(), " (", name, "). Move them to one device with .to()");
}

void check_floating(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK(at::isFloatingType(t.scalar_type()), op, ": ", name, " must be a floating-point tensor, got ",
              t.scalar_type(), " (as in PyTorch's layer: cast it first, e.g. .float())");
}

}  // namespace lmscale::ops
