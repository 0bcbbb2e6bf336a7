// The learning-rate schedule of `lmscale train`: linear warm-up, then a cosine from the peak down to
// a floor at the last step (the schedule of CS336's assignment 1 and of most LM training runs). A
// plain function of the step, so the PyTorch reference is handed the same values.
#pragma once
#include <cstdint>

namespace lmscale {

struct LrSchedule {
  double peak = 1e-3;       // reached at the end of warm-up
  double floor = 1e-4;      // reached at step `total` and kept after it
  int64_t warmup = 100;     // steps of linear warm-up (0: start at the peak)
  int64_t total = 1000;     // the step at which the cosine reaches the floor
};

// Throws naming the field: peak >= floor >= 0, 0 <= warmup <= total, total >= 1.
void validate(const LrSchedule& s);

// The learning rate of update number `step` (1-based: the first optimizer step is step 1):
//   step <= warmup:          peak · step / warmup
//   warmup < step <= total:  floor + ½ (1 + cos(π (step − warmup) / (total − warmup))) (peak − floor)
//   step > total:            floor
double lr_at(const LrSchedule& s, int64_t step);

}  // namespace lmscale
