// Captures one whole training step (forward, backward, optimizer) as a CUDA graph and replays it:
// one launch per step instead of thousands, which removes the CPU launch overhead that dominates
// small models. Inputs, gradients and optimizer state keep fixed addresses across replays.
#pragma once
#include <memory>

#include "train/training_step.h"

namespace lmscale {

class GraphedStep {
 public:
  // Warms up eagerly on a side stream (allocates gradients and optimizer state), then captures.
  // Throws on CPU or on a build without CUDA.
  GraphedStep(TrainingStep& step, BenchMode mode);
  ~GraphedStep();
  void replay();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lmscale
