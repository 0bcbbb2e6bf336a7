// The grid of an end-to-end sweep (`lmscale bench`): sizes × contexts × precisions × modes × attention
// backends, the run settings every point shares, and the one place a grid point becomes a runnable
// E2EConfig. The run loop is e2e_sweep.h; the PyTorch baselines e2e_torch_baseline.h.
#pragma once
#include <string>
#include <vector>

#include "bench/e2e_bench.h"

namespace lmscale {

struct E2ESweep {
  std::vector<ModelConfig> models;  // one per --size (attention set per backend below)
  std::vector<int64_t> contexts;
  std::vector<c10::ScalarType> precisions;
  std::vector<StepMode> modes;
  std::vector<AttentionBackend> backends;
  std::vector<std::string> baselines;  // torch-eager, torch-compile, torch-compile-ro (e2e_torch_baseline.h)
  // What the baselines measure: "model" (the strongest PyTorch path: SDPA, whole model compiled) or
  // "naive" (the older baseline: attention written out op by op, each block compiled on its own).
  std::string baseline_scope = "model";
  int64_t model_context = 0;  // 0: longest context of the sweep
  E2EConfig base;             // batch, warmup, steps, device, cuda_graph
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
                       StepMode mode, AttentionBackend backend);
// Every point of the sweep, size first (then context, precision, mode, backend): the order they run in.
std::vector<E2EConfig> sweep_configs(const E2ESweep& sweep);
// "small ctx 512 bf16 train-step flash": a config in progress lines.
std::string config_label(const E2EConfig& config);

}  // namespace lmscale
