// `lmscale bench ddp`: time per training step of the LM under each data-parallel design (DDP
// naive, flat, overlap, bucketed at several caps, with fp32 or bf16 gradient communication, and
// ZeRO-2) against the same step on one device, all on top of the fastest single-device step
// (StepSetup's fused path). Per design: step, exposed communication (finish's wait), the backward's
// slowdown against the single-device backward, bytes sent per rank per step, peak memory; Kineto
// traces showing the overlap, and the bucket-size overhead model of docs/spec.md §2 (Note [DDP
// overhead model] in ddp_bench.cpp) checked against the measured best.
#pragma once
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "train/training_step.h"

namespace lmscale {

// The step bench ddp and bench zero run unless told otherwise: xl, context 512, batch 4 per rank.
inline StepSetup distributed_bench_step() {
  StepSetup s;
  s.model = model_config("xl");
  s.context = 512;
  s.model.context_length = std::max(s.model.context_length, s.context);
  return s;
}

struct DdpBenchOptions {
  // The step every design runs (model, batch per rank, context, the fast-path switches; by default
  // StepSetup's fused path at xl, context 512): each precision below sets its precision, each rank
  // its device.
  StepSetup step = distributed_bench_step();
  std::vector<std::string> precisions{"fp32", "bf16"};
  std::vector<std::string> impls{"single", "naive", "flat", "overlap", "bucketed"};  // also "zero2"
  std::vector<double> bucket_mb{1, 10, 100, 1000};
  double first_bucket_mb = -1;                    // bucketed / zero2: cap of the first bucket (<0: same)
  std::vector<std::string> comm_dtypes{"fp32"};  // fp32, bf16: every DDP design runs with each
  int check_consistency = 0;                      // every N steps compare parameter checksums (0: never)
  // > 0: a training-curve run instead of a timing run. Every design starts from the same fresh
  // model (rank r trains on its own seeded batch), the mean loss over ranks is recorded every
  // loss_every steps (metric "loss"), and <out>/ddp_loss.md tabulates the curves side by side.
  int loss_every = 0;
  // NCCL: CTA bounds per collective and a high-priority stream (0/false: the LMSCALE_NCCL_* env or
  // NCCL's defaults); see distributed::NcclTuning.
  int nccl_max_ctas = 0, nccl_min_ctas = 0;
  bool nccl_high_priority = false;
  int warmup = 2;
  int steps = 5;
  std::string backend = "auto";  // nccl when GPUs are visible, else gloo
  std::string out = "results";
  std::string trace_dir;          // "" = no traces; else rank 0 writes Chrome traces of one step
  std::vector<std::string> trace_impls{"naive", "bucketed-100MB"};  // impl or label
  // The traced step records GPU kernels only (no host operators): the profiler's host-side cost then
  // stays small enough that the step's GPU timeline is the unprofiled one's (false: host operators too).
  bool trace_gpu_only = false;
};

// Collective (all ranks). Rank 0 writes <out>/ddp.jsonl and <out>/ddp.md and returns the table.
std::string run_ddp_bench(const DdpBenchOptions& options);

// Note [DDP overhead model]: predicted time after backward for n_b buckets = n_b·o + s/(n_b·w);
// minimised at n_b* = sqrt(s/(w·o)), i.e. bucket bytes b* = sqrt(s·w·o). Pure functions.
double overhead_model_seconds(double s_bytes, double w_bytes_per_s, double o_seconds, double n_buckets);
double best_bucket_bytes(double s_bytes, double w_bytes_per_s, double o_seconds);

}  // namespace lmscale
