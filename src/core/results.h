// Results are data: every measurement becomes one JSON object (one line of <out>/<bench>.jsonl)
// carrying bench, impl, the config, metric/value/unit and the run's provenance (gpu, commit, date,
// command); humans get a markdown table rendered from the same records (docs/design.md §4). The
// fields and their units: docs/results/SCHEMA.md (names in core/record.h).
#pragma once
#include <nlohmann/json.hpp>

#include <functional>
#include <iosfwd>
#include <stdexcept>
#include <string>
#include <vector>

namespace lmscale {

using Json = nlohmann::json;

// Provenance shared by every record of one CLI invocation. set_run_info() is called once by the
// CLI's main; library users who never call it get command "" and the detected commit/date.
struct RunInfo {
  std::string command;  // the exact command line, as typed
  std::string date;     // UTC, ISO 8601, taken once per invocation
  std::string commit;   // $LMSCALE_COMMIT, else `git rev-parse --short HEAD` of the source tree
  std::string gpu;      // device name, filled by the benchmark that picks the device
};
const RunInfo& run_info();
void set_run_command(int argc, char** argv);
void set_run_gpu(const std::string& gpu);

// A record with bench, impl, the schema version, status ok and the provenance fields filled in
// (the JSON of lmscale::Record, core/record.h, for callers that fill the rest by hand).
Json make_record(const std::string& bench, const std::string& impl);

// A result that could not be written (disk full, I/O error, folder not writable). The message names
// the path, the system error and what was not written; the run must end non-zero (never caught as a
// failed measurement).
class ResultWriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Appends one JSON object per line to path (parent folders are created). Each line is built whole
// and written with one write() on an O_APPEND descriptor, so the file only ever holds whole lines
// (a short write is cut back) and concurrent writers never interleave; the file is fsynced before
// returning. Throws ResultWriteError naming the path and how many records were not written.
void append_jsonl(const std::string& path, const std::vector<Json>& records);
// Writes text to path through a temporary file in the same folder, fsynced and renamed into place,
// so a reader sees the old file or the new one, never half of one. Throws ResultWriteError; returns path.
std::string write_text(const std::string& path, const std::string& text);
// How many writes of results failed in this process (each also threw ResultWriteError).
int result_write_failures();

// The system call writes go through: ::write, unless a test installs a fault (a full disk, an I/O
// error, a short write). Pass an empty function to restore ::write.
using WriteHook = std::function<long(int fd, const void* data, size_t size)>;
void set_write_hook(WriteHook hook);

// Reads every record of a .jsonl file (blank lines skipped; a malformed line throws naming it).
// For tests and tools that want to stop at damage; readers of result folders use read_records.
std::vector<Json> read_jsonl(const std::string& path);

// What read_records saw in one or more files.
struct ReadStats {
  size_t records = 0;  // records returned
  size_t skipped = 0;  // damaged lines skipped (each warned about with file:line)
  size_t newer = 0;    // records of a newer schema, passed through unchanged
};
// Reads the records of a .jsonl file, surviving damage: a line that is not a JSON object is skipped
// with a warning naming file:line on `warnings` (a truncated last line, garbage, a merge conflict),
// and reading goes on. Records are returned in today's schema (normalize_record, core/record.h);
// records of a newer schema are kept unchanged. A missing file throws. Counts are added to *stats.
std::vector<Json> read_records(const std::string& path, ReadStats* stats = nullptr, std::ostream* warnings = nullptr);

// A markdown table built row by row; cells are strings already formatted by the caller.
class MarkdownTable {
 public:
  explicit MarkdownTable(std::vector<std::string> headers) : headers_(std::move(headers)) {}
  void add_row(std::vector<std::string> cells);
  std::string render() const;
  bool empty() const { return rows_.empty(); }

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// Fixed-point formatting used in tables ("12.35"); NaN prints as "-".
std::string fmt(double v, int decimals = 2);
// "1.23 GiB" style.
std::string fmt_bytes(double bytes);

}  // namespace lmscale
