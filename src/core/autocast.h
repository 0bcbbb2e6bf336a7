// RAII scope for mixed precision from C++: inside it, eligible ops on `device` run in `dtype`
// (e.g. bf16) exactly as under torch.autocast in Python; leaving it clears the cast cache.
// A no-op when dtype is fp32 (or when enabled is false), so callers need no branches.
#pragma once
#include <ATen/autocast_mode.h>

namespace lmscale {

// Under autocast on x's device, x cast to the autocast dtype; x itself otherwise. For a tensor that
// feeds several matmuls (the normed input of the Q, K, V projections; of W1 and W3): autocast would
// cast it once per matmul, and each cast is one more kernel forward and one more backward.
inline at::Tensor cast_for_autocast(const at::Tensor& x) {
  const auto device = x.device().type();
  if (!x.is_floating_point() || !at::autocast::is_autocast_enabled(device)) return x;
  return x.to(at::autocast::get_autocast_dtype(device));
}

// The autocast dtype of a training precision: fp8 (Float8_e4m3fn, see parse_dtype) runs everything
// but its FP8 GEMMs under bf16 autocast; every other precision is its own autocast dtype.
inline c10::ScalarType autocast_dtype(c10::ScalarType precision) {
  return precision == c10::kFloat8_e4m3fn ? c10::kBFloat16 : precision;
}

class AutocastScope {
 public:
  // `precision` is a training precision: autocast runs in autocast_dtype(precision).
  AutocastScope(c10::DeviceType device, c10::ScalarType precision, bool enabled = true)
      : device_(device), dtype_(autocast_dtype(precision)),
        active_(enabled && dtype_ != c10::kFloat && dtype_ != c10::kDouble) {
    if (!active_) return;
    prev_enabled_ = at::autocast::is_autocast_enabled(device_);
    prev_dtype_ = at::autocast::get_autocast_dtype(device_);
    at::autocast::set_autocast_enabled(device_, true);
    at::autocast::set_autocast_dtype(device_, dtype_);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!active_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(device_, prev_enabled_);
    at::autocast::set_autocast_dtype(device_, prev_dtype_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  c10::ScalarType dtype_;
  bool active_;
  bool prev_enabled_ = false;
  c10::ScalarType prev_dtype_ = c10::kFloat;
};

}  // namespace lmscale
