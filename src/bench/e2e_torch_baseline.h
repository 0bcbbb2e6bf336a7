// The PyTorch baselines of `lmscale bench --compare`: the same model and step measured by
// `python -m lmscale.baseline.e2e` (python/lmscale/baseline/e2e.py), one process per impl for a list
// of configs. The protocol: the configs go to the module's stdin as JSON lines (one per config, with
// an "id"); for each config the module prints one line {"id": i, "records": [...]} holding that
// config's e2e records in the results schema (docs/results/SCHEMA.md), flushed as it finishes.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "bench/e2e_bench.h"

namespace lmscale {

// The baselines, in the order a sweep runs them: torch-eager, torch-compile, torch-compile-ro, then
// torchao float8 + compile (torch-float8, torch-float8-ro: precision fp8 only).
const std::vector<std::string>& torch_baseline_impls();
// Throws, naming the baselines there are, for anything else.
void check_torch_baseline(const std::string& impl);
// The baseline scopes: "model" (the strongest PyTorch path, the default) and "naive" (the older one).
void check_baseline_scope(const std::string& scope);
// True for the impls that run torch.compile (their compile time is reported, never timed).
bool torch_baseline_compiles(const std::string& impl);
// What the impl measures under the scope, one line for e2e.md (ends in a newline).
std::string torch_baseline_description(const std::string& impl, const std::string& scope);

// Runs the module ONE time over all configs for one impl and returns the results in lmscale's terms,
// in config order. on_result(i, result) is called as config i's line arrives, so callers can record
// as it goes. A config the process never answered (a missing interpreter, no torch there, a crash)
// gets status error with the process's real exit code, its last lines, and the fix (LMSCALE_PYTHON).
std::vector<E2EResult> run_torch_baselines(const std::vector<E2EConfig>& configs, const std::string& impl,
                                           const std::string& scope = "model",
                                           const std::function<void(size_t, const E2EResult&)>& on_result = {});

}  // namespace lmscale
