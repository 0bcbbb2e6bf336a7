// Phase timing with CUDA events or the host clock; see timer.h.
#include "core/timer.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include "core/device.h"

namespace lmscale {

int StepClock::mark() {
  if (device_.is_cuda()) {
    // BACKEND_DEFAULT = cudaEventDefault: timing enabled (PYTORCH_DEFAULT disables timing).
    events_.emplace_back(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
    c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
    events_.back().record(impl.getStream(device_));
    return static_cast<int>(events_.size()) - 1;
  }
  host_.push_back(std::chrono::steady_clock::now());
  return static_cast<int>(host_.size()) - 1;
}

void StepClock::synchronize() {
  if (device_.is_cuda() && !events_.empty()) events_.back().synchronize();
}

double StepClock::ms(int a, int b) const {
  if (device_.is_cuda()) return events_.at(a).elapsedTime(events_.at(b));
  return std::chrono::duration<double, std::milli>(host_.at(b) - host_.at(a)).count();
}

void StepClock::clear() {
  events_.clear();
  host_.clear();
}

}  // namespace lmscale
