// Checkpoints of `lmscale train` (docs/training.md, Checkpoints): one folder per saved step,
// <dir>/step-NNNNNNNN, holding the model (model.safetensors, in the PyTorch reference's tensor names, so
// `safetensors.torch.load_file` + `load_state_dict` loads it into python/lmscale/baseline/e2e.py's LM),
// AdamW's state (optimizer.safetensors: both moments, the step count), the trainer's (trainer.safetensors:
// the RNG states and the training-loss sum since the last evaluation), under delayed FP8 scaling its
// histories and cached FP8 weights (fp8.safetensors, fp8_checkpoint.h), the corpus's tokenizer.json when
// it has one, and manifest.json (the run's config, step, corpus and tokenizer identity, commit, every
// file with its size and SHA-256), written last. Written atomically (Note [atomic checkpoint]).
// Which step to save, and when to stop, is the trainer's (trainer.h); which run a folder is, train_run's.
#pragma once
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "results/record.h"  // Json
#include "train/training_step.h"

namespace lmscale {

// What a run's checkpoints are and when they are written; dir "" writes none.
struct CheckpointOptions {
  std::string dir;       // the run's folder of checkpoints (step-NNNNNNNN inside)
  int64_t every = 0;     // also every K steps (0: only at the end and at stop_at)
  int64_t stop_at = 0;   // the run stops after this step, once its checkpoint is written (0: runs to the end)
  int keep = 2;          // the newest checkpoints kept; older ones are removed after each save
  Json config;           // the run's record fields (train_run_fields): what --resume matches
  Json corpus;           // name, hash, token counts and tokenizer of the corpus (manifest "corpus")
  std::string tokenizer_path;  // the corpus's tokenizer.json, copied in ("": bytes as tokens)
};

// The trainer's state beyond the model and optimizer: the last step taken (the data order is a pure
// function of (seed, step): data_order.h, so the step is the data position) and the training losses
// summed since the last evaluation (what the next train_loss record averages).
struct TrainerState {
  int64_t step = 0;
  at::Tensor loss_sum;  // fp32 scalar
  int64_t losses = 0;
};

// Note [atomic checkpoint]: every file goes into <dir>/.tmp-step-N-<pid>, each fsynced, the manifest
// last; then the folder is fsynced and renamed to step-N, and <dir> fsynced. A crash at any point
// leaves the earlier checkpoints as they were and at worst a .tmp-* folder, which no reader takes for
// a checkpoint and the next save removes. Returns the checkpoint's path. Throws naming the file that
// could not be written (a full disk: the message says so).
std::string save_checkpoint(const CheckpointOptions& options, TrainingStep& step, const TrainerState& state);

// "" when the checkpoint folder `path` is whole (its manifest parses, names this format, and lists
// files that all exist with the recorded size and SHA-256), else the problem in one sentence.
std::string checkpoint_problem(const std::string& path);

struct CheckpointInfo {
  std::string path;
  int64_t step = 0;
  Json manifest;
};

// The newest whole checkpoint in `dir` whose manifest's config equals `config` (null: any). Each
// newer one passed over is named on `log` with why (damaged, or another run's). nullopt when none.
std::optional<CheckpointInfo> find_checkpoint(const std::string& dir, const Json& config, std::ostream& log);

// The checkpoint at `path`: a step-N folder itself, or a run's folder of them (its newest whole one).
// Throws naming the path, the problem and the fix when there is none.
CheckpointInfo open_checkpoint(const std::string& path);

// Puts a checkpoint's model, AdamW state and RNG states into `step` (built for the same config) and
// returns the trainer's state. Throws naming the tensor that is missing or has another shape.
TrainerState load_checkpoint(const CheckpointInfo& checkpoint, TrainingStep& step);

// The model alone (`lmscale sample`): the config recorded in the manifest, and its weights loaded.
ModelConfig checkpoint_model_config(const CheckpointInfo& checkpoint);
void load_checkpoint_weights(const CheckpointInfo& checkpoint, TransformerLM& model);

// lmscale's parameter name → the PyTorch reference's (token_embeddings.weight → emb,
// layers.i.attn.q_proj.weight → blocks.i.attn.q.weight, layers.i.ffn.w1 → blocks.i.w1, ln_final → ln,
// lm_head → head): the renames of python/lmscale/baseline/train.py's RENAMES.
std::string reference_name(const std::string& lmscale_name);

}  // namespace lmscale
