// `lmscale bench zero`: memory and time of a training step with the optimizer state unsharded (bucketed
// DDP, every rank running the step's AdamW), sharded by the distributed optimizer (zero1: optimizer
// state 1/N; zero2: gradients 1/N too), all on the default step, and the assignment's ZeRO-1 around
// libtorch's AdamW (zero1-broadcast: DDP + owners broadcast; zero1-reduce-scatter: reduce-scatter +
// all-gather): allocated bytes after model init, just before and just after the optimizer step, the
// peak, a breakdown (parameters and their bf16 copies, gradients, optimizer state) and the time per step.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "bench/ddp_bench.h"

namespace lmscale {

struct ZeroBenchOptions {
  // The step every layout runs (model, precision, batch per rank, context, the fast-path switches; by
  // default fp32 at xl, context 512, the step of bench ddp); each rank sets its device.
  StepSetup step = distributed_bench_step();
  std::vector<std::string> impls{"unsharded", "zero1", "zero2", "zero1-broadcast", "zero1-reduce-scatter"};
  double bucket_mb = 100;  // unsharded, zero1, zero2: gradient bucket cap (MiB)
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
