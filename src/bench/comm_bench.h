// `lmscale bench comm`: collective bandwidth (all-reduce, reduce-scatter, all-gather) over Gloo on
// CPU tensors and NCCL on GPU tensors, at several payload sizes, for whatever world the ranks form.
// Bandwidths follow nccl-tests: see Note [bus bandwidth] in comm_bench.cpp.
#pragma once
#include <string>
#include <vector>

namespace lmscale {

struct CommBenchOptions {
  std::vector<std::string> backends{"gloo", "nccl"};
  std::vector<std::string> ops{"all_reduce", "reduce_scatter", "all_gather"};
  std::vector<double> sizes_mb{1, 10, 100, 1024};  // MiB of fp32 payload
  int warmup = 5;
  int iters = 20;
  double seconds_per_cell = 2.0;  // fewer iterations for slow cells, never below 3
  std::string out = "results";
};

// bus bandwidth factor of nccl-tests: all_reduce 2(n-1)/n, reduce_scatter and all_gather (n-1)/n.
double bus_bandwidth_factor(const std::string& op, int world_size);

// Collective: every rank calls it (rank and world from the environment). Rank 0 appends records
// to <out>/comm.jsonl, writes <out>/comm.md and returns the table; other ranks return "".
std::string run_comm_bench(const CommBenchOptions& options);

}  // namespace lmscale
