// The memory report behind `lmscale memory`: the peak-memory table (size × context × precision ×
// mode, OOM cells), memory-history snapshots for PyTorch's memory viewer, the largest allocations
// live at the peak and where they come from, the fp32 residual-activation size, and the
// active-memory timeline (JSON, plotted to PNG by `python -m lmscale.plots memory`). Measuring is memory_run.
#pragma once
#include <string>
#include <vector>

#include "train/training_step.h"

namespace lmscale {

struct MemoryReportOptions {
  StepSetup base;  // model (size or custom, attention backend) and fast-path switches; batch below
  std::string size = "2.7B", attention = "naive", device = "auto", out = "results", stacks = "python";
  std::vector<int64_t> contexts{128, 256, 512};
  std::vector<std::string> precisions{"fp32", "bf16"}, modes{"forward", "train-step"};
  int64_t batch = 4;
  int warmup = 1, steps = 1;       // the peak: over `steps` steps after `warmup` (measure_peak)
  int64_t snapshot_context = 0;    // 0: the first of contexts
  std::string snapshot_precision;  // "": the first of precisions
  int snapshot_steps = 2, top = 10;
  bool table = true, snapshot = true, plot = true;
};

// Measures, prints and writes <out>/memory.{jsonl,md} (plus snapshots and timelines).
void run_memory_report(const MemoryReportOptions& options);

}  // namespace lmscale
