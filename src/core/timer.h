// Phase timing for one step: mark() records a point on the device's current stream (a CUDA event
// with timing enabled) or reads the host clock on CPU; after synchronize(), ms(a, b) gives the time
// between two marks. Device events need no host sync between phases, so timing does not perturb
// the overlap of CPU launch and GPU work that a real training step has.
#pragma once
#include <c10/core/Device.h>
#include <c10/core/Event.h>

#include <chrono>
#include <vector>

namespace lmscale {

class StepClock {
 public:
  explicit StepClock(c10::Device device) : device_(device) {}

  // Records a point now; returns its index for ms().
  int mark();
  // Waits for every recorded point, then makes ms() valid.
  void synchronize();
  // Milliseconds from mark a to mark b. Requires synchronize() after both were recorded.
  double ms(int a, int b) const;
  // Forgets all marks (call at the start of each step).
  void clear();

 private:
  c10::Device device_;
  std::vector<c10::Event> events_;
  std::vector<std::chrono::steady_clock::time_point> host_;
};

}  // namespace lmscale
