// The end-to-end sweep behind `lmscale bench`: sizes × contexts × precisions × modes × attention
// backends, each config run by run_e2e (OOM becomes a cell), optional PyTorch baselines of the
// same architecture measured in the same invocation (scripts/torch_baseline.py, eager and
// torch.compile; size by size: lmscale's configs, then one Python process per baseline for them),
// a progress line per config, and one markdown table + JSON Lines out. Ratios between results of
// different invocations (joined by --resume) are marked in the table.
#pragma once
#include <functional>
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
  std::string compile_scope = "blocks";  // torch-compile: "blocks" (each block + head/loss) or "model"
  int64_t model_context = 0;           // 0: longest context of the sweep
  E2EConfig base;                      // batch, warmup, steps, device, cuda_graph
  std::string out_dir = "results";
  // Take results already in <out>/e2e.jsonl for the same config, impl, batch, warm-up, steps,
  // device and GPU instead of measuring them again: a sweep cut by a time limit continues where it
  // stopped when the same command runs again with --resume.
  bool resume = false;
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

// Runs scripts/torch_baseline.py ONE time, in batch mode, over all configs for one impl
// ("torch-eager" | "torch-compile"; compile_scope "blocks" | "model" for the latter) and returns the
// results in lmscale's terms, in config order. on_result(i, result) is called as config i's line
// arrives (the script flushes one per config), so callers can record as it goes. A config the
// process never answered (Python/torch missing, a crash) gets status "error" with the reason.
std::vector<E2EResult> run_torch_baselines(const std::vector<E2EConfig>& configs, const std::string& impl,
                                           const std::function<void(size_t, const E2EResult&)>& on_result = {},
                                           const std::string& compile_scope = "blocks");

}  // namespace lmscale
