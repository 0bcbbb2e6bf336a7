// The progress of one training run on a terminal: a bar redrawn in place (at most ten times a second)
//
//   lmscale bf16 [#########.................]  812/2000  0:09 ETA 0:13  train 2.0412
//
// and, on any stream, one line per evaluation with the losses and the time left. Logs and pipes
// get the evaluation lines only. Times come from the steps run so far in this invocation.
#pragma once
#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>

#include "train_app/trainer.h"

namespace lmscale {

class TrainProgress {
 public:
  // label: what runs ("lmscale bf16"); steps: the run's updates. Bar only when `bar` (a terminal).
  TrainProgress(std::ostream& out, bool bar, std::string label, int64_t steps);
  ~TrainProgress();
  void step(int64_t s);
  void eval(const Evaluation& e);
  // Clears the bar (before a message of the run's end is printed).
  void stop() { clear_bar(); }
  // One line about the run ("checkpoint at step 1000: <path>"), after its label.
  void note(const std::string& line);
  // An evaluation kept from the records (--resume): one line saying so.
  void kept(int64_t step, double val_loss);
  // "0:13" left at step s, from the pace so far ("?" before the first step).
  std::string eta(int64_t s) const;

 private:
  void clear_bar();
  using Clock = std::chrono::steady_clock;
  std::ostream& out_;
  bool bar_;
  std::string label_;
  int64_t steps_, first_step_ = -1, last_step_ = 0;
  Clock::time_point start_, first_time_, last_draw_;
  bool drawn_ = false;
};

}  // namespace lmscale
