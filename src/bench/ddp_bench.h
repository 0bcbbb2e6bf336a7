// `lmscale bench ddp`: time per training step of the LM under each DDP policy (naive, flat,
// overlap, bucketed at several caps) against the same step on one device, the share of it spent
// waiting for communication, Kineto traces showing the overlap, and the bucket-size overhead model
// of docs/spec.md §6.3 (Note [DDP overhead model] in ddp_bench.cpp) checked against the measured best.
#pragma once
#include <string>
#include <vector>

namespace lmscale {

struct DdpBenchOptions {
  std::string size = "xl";
  std::vector<std::string> precisions{"fp32", "bf16"};
  std::vector<std::string> impls{"single", "naive", "flat", "overlap", "bucketed"};
  std::vector<double> bucket_mb{1, 10, 100, 1000};
  int64_t batch = 4;     // per rank
  int64_t context = 512;
  int warmup = 2;
  int steps = 5;
  std::string backend = "auto";  // nccl when GPUs are visible, else gloo
  std::string out = "results";
  std::string trace_dir;          // "" = no traces; else rank 0 writes Chrome traces of one step
  std::vector<std::string> trace_impls{"naive", "bucketed-100MB"};  // impl or label
};

// Collective (all ranks). Rank 0 writes <out>/ddp.jsonl and <out>/ddp.md and returns the table.
std::string run_ddp_bench(const DdpBenchOptions& options);

// Note [DDP overhead model]: predicted time after backward for n_b buckets = n_b·o + s/(n_b·w);
// minimised at n_b* = sqrt(s/(w·o)), i.e. bucket bytes b* = sqrt(s·w·o). Pure functions.
double overhead_model_seconds(double s_bytes, double w_bytes_per_s, double o_seconds, double n_buckets);
double best_bucket_bytes(double s_bytes, double w_bytes_per_s, double o_seconds);

}  // namespace lmscale
