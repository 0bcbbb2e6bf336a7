// One training run of lmscale's model on a token file: the model and step of training_step.h fed
// the batches of data_order.h, gradients clipped (grad_clip.h), the learning rate of lr_schedule.h
// set before every update, and the validation loss measured every K steps. Records, resume and the
// PyTorch reference are train_run.h's; this file only trains and reports what it saw.
#pragma once
#include <cstdint>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "train_app/checkpoint.h"
#include "train/lr_schedule.h"
#include "train/training_step.h"

namespace lmscale {

// Everything that defines a run (two runs with equal fields see the same data in the same order).
struct TrainRun {
  std::string impl = "lmscale";  // lmscale, or a PyTorch reference (train_reference.h)
  StepSetup setup;               // model, batch B, context T, precision, device, seed (init), fast path
  std::string precision = "fp32";  // as spelled on the command line (the records' name for it)
  std::string train_path, val_path;  // token files (token_file.h)
  // What the token files hold (set_corpus_identity): with the corpus's name, what tells corpora
  // apart in the records, so a --resume never keeps another corpus's curve. Empty hash: not known.
  int64_t train_tokens = 0, val_tokens = 0;
  std::string corpus_hash;
  int64_t steps = 1000;          // optimizer updates
  int64_t eval_every = 100;      // validation every K steps (and at step 0 and the last step)
  int64_t eval_batches = 8;      // validation batches of B windows each (data_order.h)
  LrSchedule lr;                 // lr.total is `steps`
  double clip = 1.0;             // global gradient-norm cap; 0: no clipping
  uint64_t data_seed = 0;        // the order of the training windows
  // --pack: every row cut into its documents after each end-of-file id (packing.h), attention kept
  // within them; the loss is unchanged (every position, the id's target included).
  bool pack = false;
  int64_t end_of_file_id = -1;   // with pack: the corpus's (pack_end_of_file_id)
};

// Throws naming the field (and the flag) when a run cannot start.
void validate(const TrainRun& run);

// Opens both token files (checking them against the model's vocabulary: a missing or bad file throws
// naming it) and sets run.train_tokens, run.val_tokens and run.corpus_hash (16 hex digits of the
// token_file.h hash of the training then the validation ids).
void set_corpus_identity(TrainRun& run);

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
  std::function<void(const std::string& path, int64_t step)> on_checkpoint;  // after each save
};

// Note [divergence]: a run stops at the first step whose training loss or gradient norm (before
// clipping), or an evaluation whose validation loss, is NaN or infinite: every step after it would
// train on garbage and every number recorded after it would mean nothing. The check costs one
// 8-byte copy to the host per step (the host must know to stop); the run's records then end in one
// record of status `diverged` naming the step, and the invocation exits 1.
class TrainingDiverged : public std::runtime_error {
 public:
  TrainingDiverged(int64_t step, const std::string& message) : std::runtime_error(message), step_(step) {}
  int64_t step() const { return step_; }

 private:
  int64_t step_;
};

// The one-line message of a divergence at `step`: which value (`what`: "training loss", "gradient
// norm", "validation loss") was `value`, and the likely cause with its fix (the learning rate and
// its flags; fp16's range; clipping turned off).
std::string divergence_message(const TrainRun& run, int64_t step, const std::string& what, double value);

// Trains lmscale's model (run.impl "lmscale"). `recorded`: evaluation steps already in the records
// (--resume): they are trained through, not evaluated again. `checkpoints`: where and when to save
// (checkpoint.h; a save at every checkpoints.every steps, at checkpoints.stop_at and at the last step);
// `resume_from`, when set, a checkpoint of this run to continue from: its model, AdamW and trainer
// state are loaded and training goes on at the step after it, as if never stopped (bit for bit on the
// CPU). Returns the last step taken: run.steps, or checkpoints.stop_at when that came first.
// Throws TrainingDiverged (Note [divergence]).
int64_t train_lmscale(const TrainRun& run, const std::set<int64_t>& recorded, const TrainCallbacks& callbacks,
                      const CheckpointOptions& checkpoints = {}, const std::optional<CheckpointInfo>& resume_from = {});

}  // namespace lmscale
