// End-to-end benchmark of the LM (docs/spec.md §2.1): one config → per-phase timings
// (forward, backward, optimizer; mean, std, median over timed steps after warm-up), tokens/s, MFU,
// peak memory; an out-of-memory config becomes status "oom" instead of a crash. The sweep, table
// and PyTorch baselines live in e2e_sweep.h.
#pragma once
#include <string>
#include <vector>

#include "train/training_step.h"
#include "core/results.h"
#include "core/stats.h"

namespace lmscale {

struct E2EConfig {
  StepSetup setup;
  BenchMode mode = BenchMode::TrainStep;
  int warmup = 5;
  int steps = 10;
  bool cuda_graph = false;  // replay the whole step as one CUDA graph (per-phase times then unavailable)
};

struct E2EResult {
  std::string status = "ok";  // ok | oom | error
  std::string message;         // the error for oom/error
  Summary forward, backward, optimizer, total;  // ms; backward/optimizer n=0 when the mode skips them
  std::vector<double> step_ms;                  // every step, warm-up included, in order
  double tokens_per_s = 0, mfu = 0;             // mfu 0 when the GPU's peak is unknown (or CPU)
  int64_t peak_bytes = 0;                       // high-water mark of allocated bytes during the run
  int64_t params = 0;
  Json extra;  // impl-specific fields copied into every record (baselines: compile_s, compile scope, ...)
};

// Runs one config. Only out-of-memory errors are caught (and reported as status "oom"); bad
// input throws before anything is allocated. LMSCALE_INJECT_OOM=<size>[:<context>] makes matching
// configs fail as if out of memory (used by tests of the OOM path).
E2EResult run_e2e(const E2EConfig& config);

// One record per metric (forward_ms, backward_ms, optimizer_ms, step_ms, tokens_per_s, mfu,
// peak_memory_bytes, compile_s when result.extra has it) with the config fields and result.extra;
// an OOM config yields one record with metric "status".
std::vector<Json> e2e_records(const E2EConfig& config, const E2EResult& result, const std::string& impl);

}  // namespace lmscale
