// The initial weights of lmscale's model for a setup, written for the PyTorch reference to start
// from (train_reference.h): so the two training runs differ in their numerics only, not in the draw
// of their random initial weights. Format: `<path>` holds every parameter as little-endian fp32, one
// after another; `<path>.json` lists {"name", "shape", "offset"} (offset in elements) per parameter,
// in lmscale's names (token_embeddings.weight, layers.0.attn.q_proj.weight, ...).
#pragma once
#include <string>

#include "train/training_step.h"

namespace lmscale {

// Builds the model of `setup` exactly as TrainingStep does (same seed, same device, so the same
// values as lmscale's own run) and writes its parameters. Throws naming the path when it cannot write.
void write_initial_weights(const StepSetup& setup, const std::string& path);

}  // namespace lmscale
