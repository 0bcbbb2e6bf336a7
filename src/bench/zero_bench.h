// `lmscale bench zero`: memory and time of a training step with the optimizer state unsharded
// (DDP + AdamW), sharded by ZeRO-1 (mode 1: DDP + owners broadcast; mode 2: reduce-scatter +
// all-gather) and with gradients sharded too (ZeRO-2: bucketed reduce-scatter during backward): allocated bytes after model init, just before and just after the optimizer step,
// the peak, a breakdown (parameters, gradients, optimizer state) and the time per iteration.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"

namespace lmscale {

struct ZeroBenchOptions {
  std::string size = "xl";
  std::optional<ModelConfig> model;  // when set (custom sizes, --attention): the model, named `size`
  std::string precision = "fp32";
  bool fused = true;  // StepSetup::fused: fused kernels where they exist (false: the unfused reference)
  std::vector<std::string> impls{"unsharded", "zero1-broadcast", "zero1-reduce-scatter", "zero2"};
  double bucket_mb = 25;  // zero2: gradient bucket cap (MiB)
  int64_t batch = 4;
  int64_t context = 512;
  int warmup = 2;
  int steps = 5;
  std::string backend = "auto";
  std::string out = "results";
  int check_consistency = 0;  // every N steps compare parameter checksums across ranks (0: never)
};

// Collective. Rank 0 writes <out>/zero.jsonl and <out>/zero.md and returns the table. With
// check_consistency, every N-th step compares every parameter across ranks (a divergence stops the
// run naming the parameter, the ranks and the step); the checks passed are in the records
// (consistency_checks).
std::string run_zero_bench(const ZeroBenchOptions& options);

}  // namespace lmscale
