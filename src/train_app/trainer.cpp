// lmscale's training loop; see trainer.h.
#include "train_app/trainer.h"

#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <cmath>
#include <limits>
#include <sstream>

#include "train_app/data_order.h"
#include "train_app/packing.h"
#include "train/grad_clip.h"
#include "train_app/token_file.h"

namespace lmscale {

void validate(const TrainRun& r) {
  TORCH_CHECK(r.steps >= 1, "--steps must be at least 1, got ", r.steps);
  TORCH_CHECK(r.eval_every >= 1, "--eval-every must be at least 1, got ", r.eval_every);
  TORCH_CHECK(r.eval_batches >= 1, "--eval-batches must be at least 1, got ", r.eval_batches);
  TORCH_CHECK(r.clip >= 0, "--clip must be >= 0 (0 turns clipping off), got ", r.clip);
  TORCH_CHECK(!r.pack || (r.end_of_file_id >= 0 && r.end_of_file_id < r.setup.model.vocab_size),
              "--pack needs the corpus's end-of-file id within the model's vocabulary of ", r.setup.model.vocab_size,
              ", got ", r.end_of_file_id, ": make the token files with `lmscale train corpus`");
  TORCH_CHECK(r.lr.total == r.steps, "the learning-rate schedule must end at the last step (", r.steps, "), got ",
              r.lr.total);
  validate(r.lr);
  // The loop runs the step's phases one by one, clipping between the backward and the update; the
  // modes that update inside the backward live in TrainingStep::run() and are never armed here.
  TORCH_CHECK(!r.setup.optimizer_in_backward, "lmscale train clips the gradients between the backward and the update, "
              "so AdamW cannot run inside the backward: drop --optimizer-in-backward");
  TORCH_CHECK(!r.setup.optimizer_overlap.value_or(false), "lmscale train clips the gradients between the backward and the update, "
              "so AdamW cannot run under the backward: drop --optimizer-overlap");
  validate(r.setup);
}

void set_corpus_identity(TrainRun& run) {
  const TokenFile train(run.train_path, run.setup.model.vocab_size);
  const TokenFile val(run.val_path, run.setup.model.vocab_size);
  run.train_tokens = train.size();
  run.val_tokens = val.size();
  // The validation ids continue the training file's hash: one number for the pair, order-sensitive.
  const uint64_t h = hash_ids(val.data(), val.size(), train.content_hash());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  run.corpus_hash = hex;
}

std::vector<int64_t> evaluation_steps(const TrainRun& r) {
  std::vector<int64_t> s;
  for (int64_t k = 0; k < r.steps; k += r.eval_every) s.push_back(k);
  s.push_back(r.steps);
  return s;
}

std::string divergence_message(const TrainRun& run, int64_t step, const std::string& what, double value) {
  std::ostringstream os;
  // NaN's sign is noise ("-nan"): the value is said as NaN, inf or -inf.
  os << "diverged at step " << step << ": the " << what << " is "
     << (std::isnan(value) ? "NaN" : value > 0 ? "inf" : "-inf") << ". ";
  if (run.precision == "fp16") {
    os << "Likely cause: fp16's range (values past 65504 overflow): train in bf16 or fp32, or lower --lr";
  } else if (step == 0) {
    os << "Likely cause: the precision or the model's size, since nothing has been trained yet: try "
          "--precision fp32";
  } else {
    os << "Likely cause: the learning rate, --lr " << run.lr.peak;
    if (step > 0) os << " (" << lr_at(run.lr, step) << " at this step)";
    os << ", too high for this model: lower --lr or lengthen --lr-warmup";
    if (run.clip <= 0) os << ", and turn clipping on (--clip 1)";
  }
  os << ". The run stopped there; the evaluations before step " << step << " are kept";
  return os.str();
}

int64_t train_lmscale(const TrainRun& run, const std::set<int64_t>& recorded, const TrainCallbacks& cb,
                      const CheckpointOptions& ckpt, const std::optional<CheckpointInfo>& resume_from) {
  validate(run);
  const auto start = std::chrono::steady_clock::now();
  StepSetup setup = run.setup;
  setup.optimizer_overlap = false;  // unset means off here, whatever the precision's default: validate() above
  const int64_t B = setup.batch, T = setup.context;
  const TokenFile train(run.train_path, setup.model.vocab_size);
  const TokenFile val(run.val_path, setup.model.vocab_size);
  const std::vector<int64_t> val_starts = validation_window_starts(run.eval_batches * B, val.size(), T);
  (void)train_window_starts(run.data_seed, 0, B, train.size(), T);  // a file too short fails before the model is built

  TrainingStep step(setup);  // seeds and initialises the model
  FusedAdamW& optimizer = step.optimizer();
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(setup.device);
  at::Tensor loss_sum = at::zeros({}, f32), last_norm;
  int64_t losses = 0;
  // The step's own input tensors take each batch in place (copy_), so their addresses never move.
  // --pack: the rows' documents too, found on the host from the token file (no copy back).
  auto load = [&](const TokenFile& file, const std::vector<int64_t>& starts) {
    const Batch b = batch_of(file, starts, T, setup.device);
    step.inputs().copy_(b.inputs);
    step.targets().copy_(b.targets);
    if (run.pack)
      step.set_segments(packed_segments(segment_offsets(file, starts, T, run.end_of_file_id), B, T, setup.device));
  };
  auto evaluate = [&](int64_t s) {
    at::Tensor sum = at::zeros({}, f32);
    for (int64_t i = 0; i < run.eval_batches; ++i) {
      const std::vector<int64_t> starts(val_starts.begin() + i * B, val_starts.begin() + (i + 1) * B);
      load(val, starts);
      step.forward(StepMode::Forward);  // no autograd, same autocast and kernels as training
      sum += step.last_loss().detach().to(at::kFloat);
    }
    step.release_loss();
    const double nan = std::numeric_limits<double>::quiet_NaN();
    Evaluation e;
    e.step = s;
    e.val_loss = sum.item<double>() / static_cast<double>(run.eval_batches);
    if (!std::isfinite(e.val_loss))  // Note [divergence]
      throw TrainingDiverged(s, divergence_message(run, s, "validation loss", e.val_loss));
    e.train_loss = losses ? loss_sum.item<double>() / static_cast<double>(losses) : nan;
    e.grad_norm = last_norm.defined() ? last_norm.item<double>() : nan;
    e.lr = s == 0 ? 0.0 : lr_at(run.lr, s);
    e.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (cb.on_eval) cb.on_eval(e);
  };

  const std::vector<int64_t> evals = evaluation_steps(run);
  const std::set<int64_t> eval_at(evals.begin(), evals.end());
  int64_t first = 1;
  if (resume_from) {
    const TrainerState state = load_checkpoint(*resume_from, step);
    TORCH_CHECK(state.step < run.steps, "checkpoint ", resume_from->path, " is of step ", state.step,
                ", the run's last is ", run.steps, ": nothing is left to train");
    first = state.step + 1;
    loss_sum.copy_(state.loss_sum);
    losses = state.losses;
  } else if (!recorded.count(0)) {
    evaluate(0);
  }
  for (int64_t s = first; s <= run.steps; ++s) {
    load(train, train_window_starts(run.data_seed, s - 1, B, train.size(), T));
    step.forward(StepMode::TrainStep);
    step.backward();
    last_norm = clip_grad_norm(optimizer.params(), run.clip);
    const at::Tensor loss = step.last_loss().detach().to(at::kFloat);
    {  // Note [divergence]: checked before the update, so a non-finite gradient never reaches the weights
      const at::Tensor seen = (last_norm.defined() ? at::stack({loss, last_norm.to(at::kFloat)}) : loss.reshape({1})).cpu();
      const double l = seen[0].item<double>(), n = seen.numel() > 1 ? seen[1].item<double>() : 0.0;
      if (!std::isfinite(l)) throw TrainingDiverged(s, divergence_message(run, s, "training loss", l));
      if (!std::isfinite(n)) throw TrainingDiverged(s, divergence_message(run, s, "gradient norm", n));
    }
    optimizer.set_lr(lr_at(run.lr, s));
    step.optimizer_step();
    loss_sum += loss;  // summed on the device
    ++losses;
    if (eval_at.count(s)) {
      if (!recorded.count(s)) evaluate(s);
      loss_sum.zero_();
      losses = 0;
    }
    const bool stop = ckpt.stop_at > 0 && s == ckpt.stop_at && s < run.steps;
    if (!ckpt.dir.empty() && ((ckpt.every > 0 && s % ckpt.every == 0) || s == run.steps || stop)) {
      const std::string path = save_checkpoint(ckpt, step, {s, loss_sum, losses});
      if (cb.on_checkpoint) cb.on_checkpoint(path, s);
    }
    if (cb.on_step) cb.on_step(s);
    if (stop) return s;
  }
  return run.steps;
}

}  // namespace lmscale
