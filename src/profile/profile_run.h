// Runs the training step under libtorch's own Kineto profiler (no nsys needed) and returns the
// kernel table of each phase the mode runs: forward, backward and optimizer are each profiled in
// their own profiler window with a device sync between them, so every kernel belongs to one phase.
// Aggregation is bench/profile_summary; tables and files are written by src/cli/profile.cpp.
#pragma once
#include <string>
#include <vector>

#include "core/stats.h"

#include "profile/profile_summary.h"
#include "train/training_step.h"

namespace lmscale {

struct ProfileOptions {
  StepSetup setup;
  StepMode mode = StepMode::TrainStep;  // which phases: forward; + backward; + optimizer
  int warmup = 2;          // unprofiled full steps first (allocator warm-up, cuBLAS heuristics)
  int steps = 3;           // profiled steps; tables are per step
  std::string trace_path;  // if set: one more full step profiled in one window, saved as a Chrome
                           // trace (opens in Perfetto / chrome://tracing)
};

struct ProfileReport {
  std::vector<PhaseProfile> phases;  // forward, backward, optimizer (those the mode runs)
  std::vector<double> wall_ms;       // per phase, host time incl. sync and profiler overhead (mean)
  std::vector<Summary> wall;         // per phase, the same over the profiled steps: the spread the
                                     // noise guard (core/stats.h) judges the tables by
  std::string trace_path;            // where the trace was saved ("" if not asked)
};

// Called once per `lmscale profile` run (and by tests on a tiny CPU model). On CUDA the tables
// hold GPU kernel time; on CPU they hold CPU op self time. Throws on invalid setups (validate()).
ProfileReport run_profile(const ProfileOptions& options);

}  // namespace lmscale
