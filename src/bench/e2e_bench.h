// End-to-end benchmark of the LM (docs/spec.md §2.1): one config → per-phase timings
// (forward, backward, optimizer; mean, std, median over timed steps after warm-up), tokens/s, MFU,
// peak memory; a config that fails (out of memory, a failed CUDA-graph capture, a kernel error)
// becomes a cell with a Status and a reason instead of a crash. The sweep is e2e_sweep.h, the
// PyTorch baselines e2e_torch_baseline.h.
#pragma once
#include <string>
#include <vector>

#include "train/training_step.h"
#include "core/results.h"
#include "core/stats.h"
#include "core/status.h"

namespace lmscale {

struct E2EConfig {
  StepSetup setup;
  StepMode mode = StepMode::TrainStep;
  int warmup = 5;
  int steps = 10;
  // Replay the whole step as one CUDA graph when the device is CUDA (the default: shapes are
  // static); per-phase times are then unavailable. Ignored on CPU. A failed capture falls back to
  // the eager step, and the result says so (E2EResult::cuda_graph, cuda_graph_note).
  bool cuda_graph = true;
};

struct E2EResult {
  Status status = Status::ok;
  std::string reason;  // why, when status is not ok (one line)
  Summary forward, backward, optimizer, total;  // ms; backward/optimizer n=0 when the mode skips them
  std::vector<double> step_ms;                  // every step, warm-up included, in order
  double tokens_per_s = 0, mfu = 0;             // mfu 0 when the GPU's peak is unknown (or CPU)
  int64_t peak_bytes = 0;                       // high-water mark of allocated bytes during the run
  int64_t params = 0;
  bool cuda_graph = false;      // whether the timed steps replayed a CUDA graph
  std::string cuda_graph_note;  // why not, when E2EConfig::cuda_graph asked for one on CUDA
  Json extra;  // impl-specific fields copied into every record (baselines: compile_s, compile scope, ...)
};

// Runs one config. Bad input throws before anything is allocated; a failure while measuring becomes
// the result's status: oom (the CUDA caching allocator's c10::OutOfMemoryError, the CPU allocator's
// "can't allocate memory", std::bad_alloc), capture-failed (a CUDA-graph capture error that reached
// here), error (anything else, a kernel launch error say) — with the reason, so a sweep goes on.
// Fault injection for tests, matching configs by size and optionally context (core/fault_injection.h):
//   LMSCALE_INJECT_OOM=<size>[:<context>]    a real allocation far beyond any memory on the config's
//                                            device (so CPU runs raise the CPU allocator's error)
//   LMSCALE_INJECT_FAULT=<fault>@<size>[:<context>][,...]   fault: oom | capture | error, or
//                                            capture-sync (a real capture failure: train/graphed_step.h)
E2EResult run_e2e(const E2EConfig& config);

// A cell's CUDA-graph capture note (E2EResult::cuda_graph_note), if any, on a line of its own to
// stderr: call it once the cell's progress line has ended.
void print_capture_note(const E2EResult& result);

// One record per metric (forward_ms, backward_ms, optimizer_ms, step_ms, tokens_per_s, mfu,
// peak_memory_bytes, compile_s when result.extra has it) with the config fields and result.extra;
// a failed config yields one record with metric "status" and the reason.
std::vector<Json> e2e_records(const E2EConfig& config, const E2EResult& result, const std::string& impl);
// The reader beside that writer: adds one e2e record (any impl, this schema's names) to result.
// Fields only baselines have (e2e_baseline_fields) go to result.extra.
void add_e2e_record(const Json& record, E2EResult& result);
// Fields of e2e records that only the PyTorch baselines write (compile time, compile mode, ...).
const std::vector<std::string>& e2e_baseline_fields();

}  // namespace lmscale
