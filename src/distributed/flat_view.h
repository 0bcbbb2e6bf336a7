// A tensor aliasing part of a flat 1-D buffer, used for gradients that live in DDP buckets and
// ZeRO flat buffers. Built with set_() rather than narrow()/view(): a narrow() result carries
// autograd view metadata, and libtorch's Optimizer::zero_grad calls detach_() on every .grad,
// which refuses views ("Can't detach views in-place"). An alias without that metadata is a plain
// tensor that writes into the buffer.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>

#include <vector>

namespace lmscale::distributed {

// Elements [offset, offset + numel(sizes)) of `flat` (contiguous, 1-D), shaped `sizes`.
inline at::Tensor flat_view(const at::Tensor& flat, int64_t offset, at::IntArrayRef sizes) {
  c10::NoGradGuard no_grad;
  std::vector<int64_t> strides(sizes.size(), 1);
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 2; d >= 0; --d) strides[d] = strides[d + 1] * sizes[d + 1];
  at::Tensor alias = at::empty({0}, flat.options());
  alias.set_(flat.storage(), flat.storage_offset() + offset, sizes, strides);
  return alias;
}

}  // namespace lmscale::distributed
