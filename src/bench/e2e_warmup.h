// `lmscale bench --warmup-study`: what skipping warm-up does to the measured step time.
#pragma once
#include <string>

#include "bench/e2e_bench.h"

namespace lmscale {

// The same config with 0, 1, 2 and 5 warm-up steps (in that order, in this process: the 0 run also
// pays the process's one-time costs). Writes <out>/e2e_warmup.{jsonl,md}; returns the table.
std::string run_warmup_study(const E2EConfig& config, const std::string& out_dir);

}  // namespace lmscale
