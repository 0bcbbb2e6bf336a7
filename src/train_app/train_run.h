// `lmscale train`'s run loop: one training run per (precision, impl), lmscale's (trainer.h) or the
// PyTorch reference's (train_reference.h), each evaluation appended to <out>/train.jsonl as records
// (docs/results/SCHEMA.md, bench "train") the moment it is measured, with --resume keeping what is
// already there; then the loss comparison of the runs (train_compare.h) to <out>/train_compare.md.
#pragma once
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "results/record.h"
#include "train_app/trainer.h"

namespace lmscale {

struct TrainOptions {
  TrainRun base;                        // impl and precision are set per run
  std::vector<std::string> precisions;  // as spelled; each also set in base.setup by `setup_for`
  std::vector<std::string> impls;       // "lmscale" and/or PyTorch references
  // Turns a precision name into the run's StepSetup (the CLI's to_setup), so that a new precision
  // needs no change here.
  std::function<StepSetup(const std::string& precision)> setup_for;
  std::string out = "results";
  bool resume = false;  // keep the records; lmscale's runs continue from their newest whole checkpoint
  // Checkpoints of lmscale's runs (checkpoint.h), in <out>/checkpoints/<impl>-<precision>/: one at the
  // last step, one every save_every steps (0: none between), and at stop_at, where the run then stops
  // (0: it does not). The PyTorch reference keeps none: it always runs to the end.
  int64_t save_every = 0, stop_at = 0;
  int keep_checkpoints = 2;
};

struct TrainOutcome {
  int runs = 0, failures = 0, skipped = 0;  // skipped: complete in the records already (--resume)
  int diverged = 0;                         // of the failures, runs stopped by Note [divergence]
  int stopped = 0;                          // runs that stopped at --stop-at with a checkpoint
  std::string comparison;                   // the markdown of train_compare.md ("" with one run)
};

// The config fields every record of a run carries; two runs with equal fields are the same run.
Json train_run_fields(const TrainRun& run);

// The evaluation steps of `run` that <out>/train.jsonl already holds (val_loss records of the same
// run fields, status ok).
std::set<int64_t> recorded_evaluations(const std::vector<Json>& records, const TrainRun& run);

// Where lmscale's checkpoints of a run of this precision go.
std::string checkpoint_folder(const std::string& out, const std::string& impl, const std::string& precision);

TrainOutcome run_training(const TrainOptions& options);

}  // namespace lmscale
