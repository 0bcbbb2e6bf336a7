// The outcome of one measured cell (a config of a sweep, a baseline, a design): every record and
// table says it with one of these words, so a reader can count failures without parsing messages.
// Serialised in one place (to_string / status_from_string); see docs/results/SCHEMA.md.
#pragma once
#include <stdexcept>
#include <string>

namespace lmscale {

enum class Status {
  ok,              // measured
  oom,             // the device (or host) ran out of memory: a result, not a failure of the tool
  capture_failed,  // CUDA-graph capture failed; the record's `reason` says why
  error,           // anything else went wrong in this cell (kernel error, crashed baseline, ...)
  skipped,         // not run on purpose (unsupported here, already measured, ...)
  diverged,        // training stopped at a non-finite loss or gradient norm; the `reason` names the step
};

inline std::string to_string(Status s) {
  switch (s) {
    case Status::ok: return "ok";
    case Status::oom: return "oom";
    case Status::capture_failed: return "capture-failed";
    case Status::error: return "error";
    case Status::skipped: return "skipped";
    case Status::diverged: return "diverged";
  }
  return "error";
}

// Reads the word back; also the spellings of records written before the schema was fixed ("OOM").
inline Status status_from_string(const std::string& word) {
  if (word == "ok") return Status::ok;
  if (word == "oom" || word == "OOM") return Status::oom;
  if (word == "capture-failed") return Status::capture_failed;
  if (word == "error") return Status::error;
  if (word == "skipped" || word == "n/a") return Status::skipped;
  if (word == "diverged") return Status::diverged;
  throw std::invalid_argument("unknown status '" + word +
                              "' (expected ok, oom, capture-failed, error, skipped or diverged)");
}

// A failed cell that should make the run exit non-zero: running out of memory is a measurement.
// A diverged training run is one too: its numbers after the divergence mean nothing.
inline bool is_failure(Status s) {
  return s == Status::capture_failed || s == Status::error || s == Status::diverged;
}

}  // namespace lmscale
