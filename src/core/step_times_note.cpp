// The note under a table of step times; see step_times_note.h.
#include "core/step_times_note.h"

#include <cmath>

#include "core/stats.h"

namespace lmscale {

std::string step_times_note(int noisy, const std::set<std::string>& why, int steps, bool cuda_events) {
  std::string note = "\nStep: mean ± standard deviation over " + std::to_string(steps) + " timed steps, each the " +
                     "slowest rank's, by " + (cuda_events ? "CUDA events" : "the host clock on the CPU") + ".\n";
  if (noisy == 0) return note;
  std::string w;
  for (const auto& x : why) w += (w.empty() ? "" : "; ") + x;
  note += "\n**⚠ " + std::to_string(noisy) + (noisy == 1 ? " step time is" : " step times are") +
          " not to be trusted** (" + w + "): their steps spread by more than " +
          std::to_string(static_cast<int>(std::lround(100 * kNoisySpread))) + " % of the mean, or are fewer than " +
          std::to_string(kTrustedSteps) + ". Measure again on an idle machine" +
          (steps < 4 * kTrustedSteps ? ", with at least `--steps " + std::to_string(4 * kTrustedSteps) + "`" : "") +
          ".\n";
  return note;
}

}  // namespace lmscale
