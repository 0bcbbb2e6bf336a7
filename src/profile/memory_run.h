// Memory measurements of the training step on CUDA: the peak-memory cell of one config (forward
// only or full train step; OOM is a result, not a crash) and a recorded memory history of a few
// steps (the .pickle PyTorch's memory viewer opens, plus lmscale's own event stream with the op
// and phase of every allocation, replayed by bench/memory_timeline). Without CUDA every entry
// point reports "needs CUDA" instead of measuring; tables and files are written by src/cli/memory.cpp.
#pragma once
#include <string>

#include "profile/memory_timeline.h"
#include "train/training_step.h"

namespace lmscale {

// Why memory measurements cannot run on `device`, or "" when they can (a CUDA device in a build
// with CUDA). Callers print it and skip, so CPU runs stay clean.
std::string memory_unsupported_reason(const c10::Device& device);

struct PeakCell {
  std::string status;         // "ok" | "OOM" | "n/a" (no CUDA; see `note`)
  std::string note;           // the reason for n/a, or the OOM message's first line
  int64_t after_init = 0;     // bytes allocated after building model + optimizer + batch
  int64_t peak = 0;           // peak bytes allocated during one steady-state step
};

// Builds a fresh TrainingStep, runs one warm-up step of `mode` (creates the optimizer state), resets
// the peak counter, runs one more and reads the peak. Forward mode runs without autograd.
// Releases everything (and the allocator cache) before returning, also after an OOM.
PeakCell measure_peak(const StepSetup& setup, StepMode mode);

struct MemoryRecording {
  std::vector<AllocEvent> events;  // every alloc/free from model construction to the last step
  MemoryTimeline timeline;
  std::string pickle_path;         // the snapshot written (empty if not asked)
};

// Records the CUDA caching allocator's history from before model construction through `steps`
// runs of `mode`, writes the snapshot pickle to `pickle_path` (if non-empty) and returns the event
// stream. stacks = "python" records no C++ frames (fast; the op names still come from lmscale's
// own tracker), "all" adds C++ stack frames to the pickle (slow to symbolize on big models).
MemoryRecording record_memory(const StepSetup& setup, StepMode mode, int steps, const std::string& pickle_path,
                              const std::string& stacks = "python");

}  // namespace lmscale
