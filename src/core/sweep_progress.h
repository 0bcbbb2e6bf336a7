// Progress lines of a benchmark sweep, one per measured cell:
//
//   [3/16 0:42 ETA 3:10] small ctx 512 bf16 train-step flash lmscale ... 26.40 ms (4.1 s)
//
// the count, the time since the sweep started, an estimate of the time left (cells still to run ×
// the mean time of the cells measured so far), what ran, its outcome and how long it took. The
// outcome is coloured (ok green, oom yellow, failures red) only when the stream is a terminal and
// NO_COLOR is unset, so logs and pipes get plain text.
#pragma once
#include <chrono>
#include <iosfwd>
#include <string>

#include "core/status.h"

namespace lmscale {

// Whether to colour: a terminal, NO_COLOR unset or empty (no-color.org), TERM not "dumb".
bool use_colour(bool is_terminal, const char* no_color, const char* term);
// "0:42", "3:10", "1:02:05" (hours only when needed).
std::string clock_time(double seconds);

class SweepProgress {
 public:
  // total: cells in the sweep. Writes to `out` (std::cerr by default); colour is decided from it.
  explicit SweepProgress(size_t total);
  SweepProgress(size_t total, std::ostream& out, bool colour);

  // Cells with a result from elsewhere (--resume): counted as done, not in the time estimate.
  void skip(size_t cells);
  // Starts a cell's clock now (the next begin() or report() measures from here).
  void restart_clock();
  // Starts the line of a cell about to run: "[i/N elapsed ETA] label ..." (flushed, no newline).
  void begin(const std::string& label);
  // Ends the line begun by begin(): the outcome, coloured by status, and the cell's time.
  void end(Status status, const std::string& outcome);
  // A cell whose result arrived without begin() (a baseline process answering config by config):
  // begin(label) + end(status, outcome), timed since the last cell ended or restart_clock().
  void report(const std::string& label, Status status, const std::string& outcome);

  size_t done() const { return done_; }
  double elapsed_s() const;

 private:
  using Clock = std::chrono::steady_clock;
  std::string prefix() const;  // "[i/N 0:42 ETA 3:10]"

  size_t total_, done_ = 0, measured_ = 0;
  double measured_s_ = 0;  // time of the cells measured by this run
  std::ostream& out_;
  bool colour_;
  Clock::time_point start_, cell_start_;
};

// A cell's line for benchmarks that print "label ..." before a cell and its result after it, on one
// line (bench ddp, zero, comm, where only rank 0 prints: `active`). When the cell throws instead, the
// destructor ends the line, so the error printed by whoever catches it starts on a line of its own.
class OpenLine {
 public:
  OpenLine(std::ostream& out, bool active, const std::string& label);
  ~OpenLine();
  OpenLine(const OpenLine&) = delete;
  OpenLine& operator=(const OpenLine&) = delete;
  void close(const std::string& outcome);  // " outcome" and the newline

 private:
  std::ostream& out_;
  bool open_;
};

}  // namespace lmscale
