// The loss comparison of `lmscale train`: the validation loss of each run at each evaluation, and
// the relative difference of each run from its reference — lmscale against the PyTorch reference at
// the same precision, and lmscale at another precision against lmscale bf16 — with the largest
// difference after warm-up checked against kLossAgreement. Built from records alone.
#pragma once
#include <string>
#include <vector>

#include "results/record.h"

namespace lmscale {

// The bound the numerics goal sets (fp8 trains as bf16): validation losses within 1 % of the reference at
// every evaluation after the learning-rate warm-up.
inline constexpr double kLossAgreement = 0.01;

// runs: the config fields of each run (train_run_fields); records: train records (any runs; a run's
// latest value per step counts). Markdown with one table and one line per compared pair; a run with
// no validation loss in the records (skipped, failed at the start) is left out.
std::string loss_comparison(const std::vector<Json>& records, const std::vector<Json>& runs, int64_t lr_warmup);

}  // namespace lmscale
