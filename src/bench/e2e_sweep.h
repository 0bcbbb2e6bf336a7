// The end-to-end sweep behind `lmscale bench`: sizes × contexts × precisions × modes × attention
// backends, each config run by run_e2e (OOM becomes a cell), optional PyTorch baselines of the
// same architecture measured in the same invocation (scripts/torch_baseline.py, eager and
// torch.compile), a progress line per config, and one markdown table + JSON Lines out.
#pragma once
#include <string>
#include <vector>

#include "bench/e2e_bench.h"

namespace lmscale {

struct E2ESweep {
  std::vector<ModelConfig> models;  // one per --size (attention set per backend below)
  std::vector<int64_t> contexts;
  std::vector<c10::ScalarType> precisions;
  std::vector<BenchMode> modes;
  std::vector<AttentionBackend> backends;
  std::vector<std::string> baselines;  // torch-eager, torch-compile
  int64_t model_context = 0;           // 0: longest context of the sweep
  E2EConfig base;                      // batch, warmup, steps, device, cuda_graph
  std::string out_dir = "results";
};

// The model's context length for a sweep: --model-context when given, else the longest context.
int64_t sweep_model_context(const E2ESweep& sweep);
// One point of the sweep as a runnable config (the one place a grid point becomes an E2EConfig).
E2EConfig sweep_config(const E2ESweep& sweep, const ModelConfig& model, int64_t context, c10::ScalarType precision,
                       BenchMode mode, AttentionBackend backend);

// Runs the sweep, appends records to <out>/e2e.jsonl, writes <out>/e2e.md and returns the table.
std::string run_e2e_sweep(const E2ESweep& sweep);

// Warm-up study: the same config with 0, 1, 2 and 5 warm-up steps (in that order, in this process:
// the 0 run also pays the process's one-time costs). Writes <out>/e2e_warmup.{jsonl,md}.
std::string run_warmup_study(const E2EConfig& config, const std::string& out_dir);

// Runs scripts/torch_baseline.py for one config ("torch-eager" | "torch-compile") and returns its
// result in lmscale's terms. A missing Python/torch gives status "error" with the reason.
E2EResult run_torch_baseline(const E2EConfig& config, const std::string& impl);

}  // namespace lmscale
