// The tolerant reader and the mapping of older records; see reader.h and docs/results/SCHEMA.md.
#include "results/reader.h"

#include <c10/util/Exception.h>

#include <fstream>
#include <iostream>
#include <map>
#include <stdexcept>

namespace lmscale {
namespace {

// Calls fn(line, line number) for every non-blank line of a .jsonl file; a missing file throws.
template <typename Fn>
void for_each_line(const std::string& path, Fn fn) {
  std::ifstream f(path);
  TORCH_CHECK(f, "cannot read ", path, ": no such file (run the benchmark first, or check --in)");
  std::string line;
  size_t n = 0;
  while (std::getline(f, line))
    if (++n, line.find_first_not_of(" \t\r") != std::string::npos) fn(line, n);
}

}  // namespace

std::vector<Json> read_jsonl(const std::string& path) {
  std::vector<Json> out;
  for_each_line(path, [&](const std::string& line, size_t n) {
    Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    TORCH_CHECK(!j.is_discarded(), path, ":", n, " is not valid JSON; fix or delete that line");
    out.push_back(std::move(j));
  });
  return out;
}

std::vector<Json> read_records(const std::string& path, ReadStats* stats, std::ostream* warnings,
                               std::vector<DamagedLine>* damaged) {
  std::ostream& warn = warnings ? *warnings : std::cerr;
  ReadStats local;
  std::vector<Json> out;
  for_each_line(path, [&](const std::string& line, size_t n) {
    Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    std::string why;
    if (j.is_discarded())
      why = "not valid JSON (a line cut short, or not a record)";
    else if (!j.is_object())
      why = "not a JSON object";
    else if (!j.contains("bench") || !j.contains("metric"))
      why = "a JSON object without bench and metric";
    if (!why.empty()) {
      if (++local.skipped <= kWarningsPerFile) warn << "warning: " << path << ":" << n << ": " << why << "; line skipped\n";
      if (damaged) damaged->push_back({n, line});
      return;
    }
    if (j.contains("schema") && j["schema"].is_number_integer() && j["schema"].get<int64_t>() > kSchemaVersion)
      ++local.newer;
    out.push_back(normalize_record(std::move(j)));
  });
  local.records = out.size();
  if (local.skipped > kWarningsPerFile)
    warn << "warning: " << path << ": " << local.skipped - kWarningsPerFile << " more damaged lines not listed ("
         << local.skipped << " in all" << (out.empty() ? ", and no record: is it a .jsonl of lmscale records?" : "")
         << ")\n";
  if (stats) {
    stats->records += local.records;
    stats->skipped += local.skipped;
    stats->newer += local.newer;
  }
  return out;
}


namespace {

void rename_field(Json& j, const char* old_name, const char* new_name) {
  auto it = j.find(old_name);
  if (it == j.end()) return;
  if (!j.contains(new_name)) j[new_name] = *it;
  j.erase(old_name);
}

}  // namespace

Json normalize_record(Json j) {
  if (!j.is_object()) return j;
  const auto version = j.find(field::schema);
  if (version != j.end() && (!version->is_number_integer() || version->get<int64_t>() >= kSchemaVersion)) return j;

  // Version 1: no schema field, names that differed between benchmarks.
  const std::string bench = j.value(field::bench, "");
  rename_field(j, "dtype", field::precision);
  rename_field(j, "seq", field::context);
  if (bench == "profile") rename_field(j, "rank", field::position);

  std::string metric = j.value(field::metric, "");
  static const std::map<std::string, std::string> kMetricNames = {
      {"step_time", "step_ms"},         {"fwd_bwd_time", "fwd_bwd_ms"},       {"exposed_comm_time", "exposed_comm_ms"},
      {"optimizer_time", "optimizer_ms"}, {"model_overhead", "model_overhead_ms"}, {"backward_time", "backward_ms"}};
  if (bench == "ddp" || bench == "zero") {
    if (auto it = kMetricNames.find(metric); it != kMetricNames.end()) metric = it->second;
  }
  if (bench == "comm" && metric == "time") metric = "time_ms";
  if (bench == "lab" && metric == "dtype") metric = "tensor_dtype";
  if (bench == "lab" && metric == "error") {  // the message was the value
    j[field::status] = to_string(Status::error);
    if (j.contains(field::value) && j[field::value].is_string()) j[field::reason] = j[field::value];
    j[field::value] = nullptr;
    metric = kStatusMetric;
  }
  if (j.contains(field::metric)) j[field::metric] = metric;
  if (j.value(field::unit, "") == "B") j[field::unit] = "bytes";
  if (j.value(field::unit, "") == "count") j[field::unit] = "";

  // Status: the old spellings, or none at all (then a number means it was measured).
  Status status = Status::ok;
  if (j.contains(field::status) && j[field::status].is_string()) {
    try {
      status = status_from_string(j[field::status].get<std::string>());
    } catch (const std::invalid_argument& e) {
      status = Status::error;
      if (!j.contains(field::reason)) j[field::reason] = e.what();
    }
  } else if (j.contains(field::value) && j[field::value].is_null()) {
    status = Status::error;
  }
  j[field::status] = to_string(status);
  if (status != Status::ok) {
    for (const char* old_reason : {"message", "error", "note"}) rename_field(j, old_reason, field::reason);
  } else if (j.contains("message") && j["message"].is_string() && j["message"].get<std::string>().empty()) {
    j.erase("message");
  }
  j[field::schema] = kSchemaVersion;
  return j;
}

}  // namespace lmscale
