// Captures one whole training step (forward, backward, optimizer) as a CUDA graph and replays it:
// one launch per step instead of thousands, which removes the CPU launch overhead that dominates
// small models. Inputs, optimizer state and the gradients (allocated inside the graph's private
// memory pool during capture) keep fixed addresses across replays.
#pragma once
#include <memory>
#include <string>

#include "train/training_step.h"

namespace lmscale {

class GraphedStep {
 public:
  // Warms up eagerly on a side stream (creates optimizer state and library workspaces), then captures.
  // Throws on CPU, on a build without CUDA, or when the capture fails (see try_capture).
  GraphedStep(TrainingStep& step, StepMode mode);
  ~GraphedStep();
  void replay();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The step as a graph where it can be one: nullptr with `note` set to one line saying why not
// (CPU device, a build without CUDA, or a capture that failed, e.g. out of memory while capturing).
// A failed capture is cleaned up (capture ended, its memory pool released, the CUDA error cleared),
// so the caller can go on with the eager step on the same TrainingStep.
std::unique_ptr<GraphedStep> try_capture(TrainingStep& step, StepMode mode, std::string& note);

}  // namespace lmscale
