// Results are data: every measurement becomes one JSON object (one line of <out>/<bench>.jsonl)
// carrying bench, impl, the config, metric/value/unit and the run's provenance (gpu, commit, date,
// command); humans get a markdown table rendered from the same records. See docs/design.md §4.
#pragma once
#include <nlohmann/json.hpp>

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

// A record with bench, impl and the provenance fields filled in.
Json make_record(const std::string& bench, const std::string& impl);

// Appends one JSON object per line to path (parent folders are created).
void append_jsonl(const std::string& path, const std::vector<Json>& records);
// Reads every record of a .jsonl file (blank lines skipped; a malformed line throws naming it).
std::vector<Json> read_jsonl(const std::string& path);
// Writes text to path, creating parent folders; returns path.
std::string write_text(const std::string& path, const std::string& text);

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
