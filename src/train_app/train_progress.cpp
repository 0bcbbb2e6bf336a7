// The progress bar and evaluation lines of `lmscale train`; see train_progress.h.
#include "train_app/train_progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "core/sweep_progress.h"

namespace lmscale {

namespace {
std::string loss_text(double v) {
  if (std::isnan(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}
}  // namespace

TrainProgress::TrainProgress(std::ostream& out, bool bar, std::string label, int64_t steps)
    : out_(out), bar_(bar), label_(std::move(label)), steps_(steps), start_(Clock::now()) {}

TrainProgress::~TrainProgress() { clear_bar(); }

std::string TrainProgress::eta(int64_t s) const {
  if (first_step_ < 0 || s <= first_step_) return "?";
  // Steps timed from the first update of this invocation (replayed steps of a resumed run included):
  // evaluations are counted in the pace, as they recur.
  const double per_step = std::chrono::duration<double>(Clock::now() - first_time_).count() / double(s - first_step_);
  return clock_time(per_step * double(steps_ - s));
}

void TrainProgress::clear_bar() {
  if (!drawn_) return;
  out_ << "\r\033[K" << std::flush;
  drawn_ = false;
}

void TrainProgress::step(int64_t s) {
  if (first_step_ < 0) {
    first_step_ = s;
    first_time_ = Clock::now();
  }
  last_step_ = s;
  if (!bar_) return;
  const auto now = Clock::now();
  if (drawn_ && s != steps_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * s / std::max<int64_t>(1, steps_));
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  out_ << "\r\033[K" << label_ << " [" << std::string(filled, '#') << std::string(kWidth - filled, '.') << "] " << s
       << "/" << steps_ << "  " << clock_time(elapsed) << " ETA " << eta(s) << std::flush;
  drawn_ = true;
}

void TrainProgress::eval(const Evaluation& e) {
  clear_bar();
  out_ << label_ << "  step " << e.step << "/" << steps_ << "  train " << loss_text(e.train_loss) << "  val "
       << loss_text(e.val_loss) << "  " << clock_time(std::chrono::duration<double>(Clock::now() - start_).count())
       << " ETA " << (e.step == steps_ ? "0:00" : eta(e.step)) << "\n"
       << std::flush;
}

void TrainProgress::note(const std::string& line) {
  clear_bar();
  out_ << label_ << ": " << line << "\n" << std::flush;
}

void TrainProgress::kept(int64_t step, double val_loss) {
  clear_bar();
  out_ << label_ << "  step " << step << "/" << steps_ << "  val " << loss_text(val_loss) << "  (kept from the records)\n"
       << std::flush;
}

}  // namespace lmscale
