// Progress lines of a sweep; see sweep_progress.h.
#include "core/sweep_progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

namespace lmscale {

bool use_colour(bool is_terminal, const char* no_color, const char* term) {
  if (!is_terminal) return false;
  if (no_color && *no_color) return false;
  return !(term && std::string(term) == "dumb");
}

std::string clock_time(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

SweepProgress::SweepProgress(size_t total)
    : SweepProgress(total, std::cerr,
                    use_colour(isatty(STDERR_FILENO), std::getenv("NO_COLOR"), std::getenv("TERM"))) {}

SweepProgress::SweepProgress(size_t total, std::ostream& out, bool colour)
    : total_(total), out_(out), colour_(colour), start_(Clock::now()), cell_start_(start_) {}

void SweepProgress::skip(size_t cells) { done_ += cells; }

void SweepProgress::restart_clock() { cell_start_ = Clock::now(); }

double SweepProgress::elapsed_s() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

std::string SweepProgress::prefix() const {
  std::string p = "[" + std::to_string(done_ + 1) + "/" + std::to_string(total_) + " " + clock_time(elapsed_s());
  // The estimate needs one measured cell; before that it would be a guess.
  if (measured_ > 0) p += " ETA " + clock_time(measured_s_ / measured_ * (total_ - done_));
  return p + "]";
}

void SweepProgress::begin(const std::string& label) {
  cell_start_ = Clock::now();
  out_ << prefix() << " " << label << " ..." << std::flush;
}

void SweepProgress::end(Status status, const std::string& outcome) {
  const double cell_s = std::chrono::duration<double>(Clock::now() - cell_start_).count();
  const char* colour = status == Status::ok    ? "\033[32m"
                       : status == Status::oom ? "\033[33m"
                       : is_failure(status)    ? "\033[31m"
                                               : "";
  const bool paint = colour_ && *colour;
  char took[32];  // seconds for a short cell, m:ss beyond a minute
  if (cell_s < 60) std::snprintf(took, sizeof took, "%.1f s", cell_s);
  out_ << " " << (paint ? colour : "") << outcome << (paint ? "\033[0m" : "") << " ("
       << (cell_s < 60 ? std::string(took) : clock_time(cell_s)) << ")\n"
       << std::flush;
  ++done_;
  ++measured_;
  measured_s_ += cell_s;
  cell_start_ = Clock::now();
}

void SweepProgress::report(const std::string& label, Status status, const std::string& outcome) {
  const Clock::time_point started = cell_start_;
  begin(label);
  cell_start_ = started;  // the cell ran since the previous one ended, not since now
  end(status, outcome);
}

OpenLine::OpenLine(std::ostream& out, bool active, const std::string& label) : out_(out), open_(active) {
  if (open_) out_ << label << " ..." << std::flush;
}

OpenLine::~OpenLine() {
  if (open_) out_ << std::endl;
}

void OpenLine::close(const std::string& outcome) {
  if (open_) out_ << " " << outcome << "\n";
  open_ = false;
}

}  // namespace lmscale
