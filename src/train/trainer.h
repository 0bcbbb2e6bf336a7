// One training run of lmscale's model on a token file: the model and step of training_step.h fed
// the batches of data_order.h, gradients clipped (grad_clip.h), the learning rate of lr_schedule.h
// set before every update, and the validation loss measured every K steps. Records, resume and the
// PyTorch reference are train_run.h's; this file only trains and reports what it saw.
#pragma once
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "train/lr_schedule.h"
#include "train/training_step.h"

namespace lmscale {

// Everything that defines a run (two runs with equal fields see the same data in the same order).
struct TrainRun {
  std::string impl = "lmscale";  // lmscale, or a PyTorch reference (train_reference.h)
  StepSetup setup;               // model, batch B, context T, precision, device, seed (init), fast path
  std::string precision = "fp32";  // as spelled on the command line (the records' name for it)
  std::string train_path, val_path;  // token files (token_file.h)
  int64_t steps = 1000;          // optimizer updates
  int64_t eval_every = 100;      // validation every K steps (and at step 0 and the last step)
  int64_t eval_batches = 8;      // validation batches of B windows each (data_order.h)
  LrSchedule lr;                 // lr.total is `steps`
  double clip = 1.0;             // global gradient-norm cap; 0: no clipping
  uint64_t data_seed = 0;        // the order of the training windows
};

// Throws naming the field (and the flag) when a run cannot start.
void validate(const TrainRun& run);

// The steps at which a run evaluates: 0, K, 2K, ... and the last step.
std::vector<int64_t> evaluation_steps(const TrainRun& run);

// What an evaluation saw. train_loss is the mean training loss of the steps since the previous
// evaluation (NaN at step 0); grad_norm the last step's norm before clipping (NaN at step 0).
struct Evaluation {
  int64_t step = 0;
  double train_loss = 0, val_loss = 0, lr = 0, grad_norm = 0;
  double elapsed_s = 0;  // since the run started (evaluations included)
};

struct TrainCallbacks {
  std::function<void(const Evaluation&)> on_eval;  // as each evaluation finishes
  std::function<void(int64_t step)> on_step;       // after each update (progress)
};

// Trains lmscale's model (run.impl "lmscale"). `recorded`: evaluation steps already in the records
// (--resume): they are trained through, not evaluated again.
void train_lmscale(const TrainRun& run, const std::set<int64_t>& recorded, const TrainCallbacks& callbacks);

}  // namespace lmscale
