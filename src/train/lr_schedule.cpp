// Warm-up + cosine learning rate; see lr_schedule.h.
#include "train/lr_schedule.h"

#include <c10/util/Exception.h>

#include <cmath>

namespace lmscale {

void validate(const LrSchedule& s) {
  TORCH_CHECK(s.floor >= 0 && s.peak >= s.floor, "learning rate: need peak (--lr ", s.peak,
              ") >= floor (--lr-min ", s.floor, ") >= 0");
  TORCH_CHECK(s.total >= 1, "learning-rate schedule: total steps must be at least 1, got ", s.total);
  TORCH_CHECK(s.warmup >= 0 && s.warmup <= s.total, "--lr-warmup ", s.warmup, " must be between 0 and the steps (",
              s.total, ")");
}

double lr_at(const LrSchedule& s, int64_t step) {
  if (step <= s.warmup) return s.warmup == 0 ? s.peak : s.peak * static_cast<double>(step) / s.warmup;
  if (step >= s.total) return s.floor;
  const double progress = static_cast<double>(step - s.warmup) / static_cast<double>(s.total - s.warmup);
  return s.floor + 0.5 * (1.0 + std::cos(M_PI * progress)) * (s.peak - s.floor);
}

}  // namespace lmscale
