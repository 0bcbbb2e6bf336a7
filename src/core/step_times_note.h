// The lines under a table of step times (bench ddp, bench zero): how the times were taken, and the noise
// guard's warning (core/stats.h) when it distrusts some of them, with the flag that measures more steps.
#pragma once
#include <set>
#include <string>

namespace lmscale {

// noisy: step times noise_problem() distrusts; why: its reasons; steps: the timed steps per design.
std::string step_times_note(int noisy, const std::set<std::string>& why, int steps, bool cuda_events);

}  // namespace lmscale
