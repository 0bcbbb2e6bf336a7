// The PyTorch reference of `lmscale train`: the spec's model written in PyTorch
// (python/lmscale/baseline/e2e.py) trained by `python -m lmscale.baseline.train` on the same token
// files, handed this run's batches, learning rates, validation windows and lmscale's initial weights
// (initial_weights.h), so that only the model code and its numerics differ. The protocol: one JSON object (the run) in a file; the module prints one line
// {"eval": {...}} per evaluation and {"step": s} as it goes, flushed.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "results/record.h"
#include "train_app/trainer.h"

namespace lmscale {

// The references there are (torch-eager) and the precisions they train in.
const std::vector<std::string>& torch_reference_impls();
bool is_torch_reference(const std::string& impl);
// Why the reference cannot train at this precision ("" when it can): it runs PyTorch autocast, so
// fp32, bf16 and fp16 only.
std::string torch_reference_unsupported(const std::string& precision);

// What the module is handed for `run` (the module's input; tests read it).
Json torch_reference_input(const TrainRun& run, const std::set<int64_t>& recorded);

// Runs the module for `run` (run.impl is a reference) with the same callbacks as train_lmscale.
// Throws with the module's last lines and the fix (LMSCALE_PYTHON) when it fails.
void train_torch_reference(const TrainRun& run, const std::set<int64_t>& recorded, const TrainCallbacks& callbacks);

}  // namespace lmscale
