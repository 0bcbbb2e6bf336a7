// Markdown tables, and records → one markdown table; see table.h.
#include "results/table.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

namespace lmscale {
namespace {
// Display width of a UTF-8 string (counts code points, so "±" and "×" are one column).
size_t display_width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}
}  // namespace

void MarkdownTable::add_row(std::vector<std::string> cells) {
  TORCH_INTERNAL_ASSERT(cells.size() == headers_.size(), "row has ", cells.size(), " cells, table has ",
                        headers_.size(), " columns");
  rows_.push_back(std::move(cells));
}

std::string MarkdownTable::render() const {
  std::vector<size_t> w(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) {
    w[c] = std::max<size_t>(3, display_width(headers_[c]));
    for (const auto& r : rows_) w[c] = std::max(w[c], display_width(r[c]));
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s = "|";
    for (size_t c = 0; c < cells.size(); ++c) s += " " + cells[c] + std::string(w[c] - display_width(cells[c]), ' ') + " |";
    return s + "\n";
  };
  std::string out = line(headers_);
  out += "|";
  for (size_t c = 0; c < headers_.size(); ++c) out += std::string(w[c] + 2, '-') + "|";
  out += "\n";
  for (const auto& r : rows_) out += line(r);
  return out;
}

std::string fmt(double v, int decimals) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string fmt_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return fmt(b, u == 0 ? 0 : 2) + " " + units[u];
}

namespace {

// Fields that belong to one metric of a cell, not to the cell: they never make a new row.
const std::set<std::string>& per_metric_fields() {
  static const std::set<std::string> s{field::metric, field::value,  field::unit, field::std_dev,
                                       field::median, field::min,    field::max,  field::n,
                                       field::status, field::reason, field::schema};
  return s;
}

// Fields that stay in the records but would only widen the table: the PyTorch baselines' protocol
// details, the CPU a cell ran on (thread count, load: the noise note points at them), and the
// model's shape where its size names it.
const std::set<std::string>& detail_fields() {
  static const std::set<std::string> s{"wall_s",           "compile_s",      "graphs_compiled", "compiled_in_timed_steps",
                                       "warmup_steps_run", "dynamic_shapes", "compile_scope",   "torch_attention",
                                       field::cpu_threads, field::load};
  return s;
}
const std::set<std::string>& shape_fields() {
  static const std::set<std::string> s{field::d_model, field::d_ff, field::layers, field::vocab, field::params};
  return s;
}

// The provenance of a run; rows point at the list of runs instead of repeating it.
const std::vector<std::string>& run_fields() {
  static const std::vector<std::string> v{field::gpu, field::commit, field::date, field::run, field::command};
  return v;
}

// Config columns first in this order (the glossary's), then any other field in order of appearance.
const std::vector<std::string>& column_order() {
  static const std::vector<std::string> v{
      field::bench,     field::impl,     field::size,       field::device,    field::backend, field::world,
      field::op,        field::size_bytes, field::context,  field::batch,     field::heads,   field::head_dim,
      field::precision, field::mode,     field::attention,  field::causal,    field::cuda_graph, field::bucket_mb,
      field::n_buckets, field::phase,    field::position,   field::kernel,    field::attention_part};
  return v;
}

std::string text(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "-";
  if (v.is_number_float()) {
    const double d = v.get<double>();
    return fmt(d, std::fabs(d) >= 100 || d == std::floor(d) ? (d == std::floor(d) ? 0 : 1) : 3);
  }
  return v.dump();
}

std::string significant(double d, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, d);
  return buf;
}

Summary summary_of(const Json& r) {
  Summary s;
  s.mean = r.value(field::value, 0.0);
  s.std = r.value(field::std_dev, 0.0);
  s.n = r.value(field::n, 0);
  return s;
}

// Why a timed metric is not to be trusted (core/stats.h's noise guard), "" when it is.
std::string noise_of(const Json& r) {
  const bool timed = r.contains(field::std_dev) && r[field::std_dev].is_number() && r.contains(field::value) &&
                     r[field::value].is_number() && r.value(field::unit, "") == "ms";
  return timed ? noise_problem(summary_of(r)) : "";
}

std::string metric_text(const Json& r) {
  const Json& v = r.value(field::value, Json());
  if (v.is_null()) return r.value(field::status, "-");
  if (!v.is_number()) return text(v);
  const std::string unit = r.value(field::unit, "");
  const double d = v.get<double>();
  if (unit == "bytes") return fmt_bytes(d);
  const bool timed = r.contains(field::std_dev) && r[field::std_dev].is_number() && r.value(field::n, 0) > 1;
  // A timed mean carries its spread, so three decimals say all it can; a single value (a loss, a sum)
  // keeps six significant digits, so two curves that differ by 1e-5 do not print alike.
  std::string s = unit == "fraction" ? fmt(d, 3) : timed || !v.is_number_float() ? text(v) : significant(d, 6);
  if (timed) s += " ± " + text(r[field::std_dev]);
  if (!noise_of(r).empty()) s += " ⚠";
  return s;
}

bool is_scalar(const Json& v) { return v.is_primitive(); }

// A table cell must not break the row: no '|' or newline.
std::string cell(std::string s) {
  for (auto& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  if (out.size() > 120) out = out.substr(0, 117) + "...";
  return out;
}

struct Row {
  Json config;                           // the row's fields (scalars only)
  std::string group;                     // bench/impl/mode: rows that should carry the same metrics
  size_t run = 0;                        // index into the runs
  std::map<std::string, Json> metrics;   // metric -> record
  std::vector<std::string> reasons;
  std::string status;                    // ok if any metric has a value, else the first status
};

}  // namespace

std::string records_table(const std::string& title, const std::vector<Json>& records) {
  std::vector<Json> runs;
  std::vector<Row> rows;
  std::map<std::string, size_t> row_of;
  std::vector<std::string> metrics, fields;
  std::set<std::string> seen_metric, seen_field;
  for (const Json& r : records) {
    if (!r.is_object()) continue;
    Json run = Json::object();
    for (const auto& f : run_fields())
      if (r.contains(f)) run[f] = r[f];
    size_t run_index = std::find(runs.begin(), runs.end(), run) - runs.begin();
    if (run_index == runs.size()) runs.push_back(run);
    Json config = Json::object();
    for (auto it = r.begin(); it != r.end(); ++it) {
      const std::string& k = it.key();
      if (per_metric_fields().count(k) || std::count(run_fields().begin(), run_fields().end(), k) ||
          !is_scalar(it.value()) || detail_fields().count(k) || (shape_fields().count(k) && r.contains(field::size)))
        continue;
      config[k] = it.value();
      if (seen_field.insert(k).second) fields.push_back(k);
    }
    const std::string key = config.dump() + "#" + std::to_string(run_index);
    auto [pos, fresh] = row_of.emplace(key, rows.size());
    if (fresh) {
      std::string group = r.value(field::bench, "") + "/" + r.value(field::impl, "") + "/" + r.value(field::mode, "");
      // A training run's step-0 evaluation comes before any update: it has a validation loss and,
      // by design, no training loss or gradient norm. It is its own group, so it is never
      // "incomplete" for lacking them.
      if (r.value(field::bench, "") == "train" && r.contains(field::step) && r[field::step] == 0) group += "/step0";
      rows.push_back(Row{config, group, run_index, {}, {}, ""});
    }
    Row& row = rows[pos->second];
    const std::string metric = r.value(field::metric, "?");
    const std::string status = r.value(field::status, "ok");
    const bool listable = !r.contains(field::value) || r[field::value].is_primitive();  // not every step's time
    if (metric != kStatusMetric && listable) {
      if (seen_metric.insert(metric).second) metrics.push_back(metric);
      row.metrics[metric] = r;
    }
    const bool has_value = r.contains(field::value) && !r[field::value].is_null();
    if (has_value || row.status.empty()) row.status = has_value ? "ok" : status;
    if (r.contains(field::reason) && r[field::reason].is_string()) {
      const std::string why = r[field::reason];
      if (std::find(row.reasons.begin(), row.reasons.end(), why) == row.reasons.end()) row.reasons.push_back(why);
    }
  }

  // Columns: fields that vary between rows (constant ones are said once above the table).
  std::vector<std::string> ordered;
  for (const auto& f : column_order())
    if (seen_field.count(f)) ordered.push_back(f);
  for (const auto& f : fields)
    if (std::find(ordered.begin(), ordered.end(), f) == ordered.end()) ordered.push_back(f);
  std::vector<std::string> varying, constant;
  for (const auto& f : ordered) {
    std::set<std::string> values;
    for (const auto& row : rows) values.insert(row.config.contains(f) ? row.config[f].dump() : "");
    if (values.size() > 1)
      varying.push_back(f);
    else if (f != field::bench)  // the file's name says it
      constant.push_back(f);
  }
  // A measured cell missing a metric its group's other cells have was cut between two writes (an
  // older lmscale wrote a cell's records one write() each): marked incomplete, never shown as 0.
  std::map<std::string, std::set<std::string>> group_metrics;
  for (const auto& row : rows)
    if (row.status == "ok")
      for (const auto& [m, rec] : row.metrics) group_metrics[row.group].insert(m);
  size_t incomplete = 0, noisy = 0;
  std::set<std::string> noise_reasons;
  for (auto& row : rows) {
    if (row.status != "ok") continue;
    for (const auto& m : group_metrics[row.group])
      if (!row.metrics.count(m)) {
        row.status = "incomplete";
        ++incomplete;
        break;
      }
    bool row_noisy = false;
    for (const auto& [m, rec] : row.metrics)
      if (const std::string why = noise_of(rec); !why.empty()) {
        row_noisy = true;
        noise_reasons.insert(why);
      }
    noisy += row_noisy;
  }
  bool any_failure = false, any_reason = false;
  for (const auto& row : rows) {
    any_failure |= row.status != "ok";
    any_reason |= !row.reasons.empty();
  }
  // Units in the headers, taken from the first record of each metric.
  std::map<std::string, std::string> unit_of;
  for (const Json& r : records)
    if (r.is_object() && !unit_of.count(r.value(field::metric, "?"))) unit_of[r.value(field::metric, "?")] = r.value(field::unit, "");

  std::vector<std::string> headers = varying;
  if (any_failure) headers.push_back("status");
  for (const auto& m : metrics) headers.push_back(unit_of[m].empty() || unit_of[m] == "bytes" ? m : m + " (" + unit_of[m] + ")");
  if (runs.size() > 1) headers.push_back("run");
  if (any_reason) headers.push_back("reason");
  MarkdownTable table(headers);
  for (const auto& row : rows) {
    std::vector<std::string> cells;
    for (const auto& f : varying) cells.push_back(cell(row.config.contains(f) ? text(row.config[f]) : ""));
    if (any_failure) cells.push_back(row.status);
    for (const auto& m : metrics) {
      auto it = row.metrics.find(m);
      cells.push_back(it == row.metrics.end() ? (row.status == "ok" ? "" : row.status == "incomplete" ? "missing" : row.status)
                                              : cell(metric_text(it->second)));
    }
    if (runs.size() > 1) cells.push_back(std::to_string(row.run + 1));
    if (any_reason) {
      std::string why;
      for (const auto& r : row.reasons) why += (why.empty() ? "" : "; ") + r;
      cells.push_back(cell(why));
    }
    table.add_row(std::move(cells));
  }

  std::string md = "## " + title + "\n\n";
  md += std::to_string(records.size()) + " records, " + std::to_string(rows.size()) +
        " rows (one per measured cell); values are means, ± the standard deviation over the timed steps.\n\n";
  if (!constant.empty()) {
    md += "Every row:";
    for (size_t i = 0; i < constant.size(); ++i) {
      const auto& f = constant[i];
      md += std::string(i ? ", " : " ") + f + " " + cell(rows.front().config.contains(f) ? text(rows.front().config[f]) : "-");
    }
    md += ".\n\n";
  }
  md += table.render() + "\n";
  if (incomplete)
    md += "**" + std::to_string(incomplete) + " incomplete " + (incomplete == 1 ? "cell" : "cells") +
          "**: measured, but some of its records are missing (a run cut between two writes); `--resume` measures "
          "it again.\n\n";
  if (noisy) {
    std::string why;
    for (const auto& w : noise_reasons) why += (why.empty() ? "" : "; ") + w;
    md += "**⚠ " + std::to_string(noisy) + (noisy == 1 ? " cell is" : " cells are") + " not to be trusted** (" + why +
          "; the records' cpu_threads and load say what the CPU was doing): measure again on an idle machine with "
          "at least " + std::to_string(kTrustedSteps) + " timed steps, e.g. the run's command with `--steps 20`.\n\n";
  }
  md += runs.size() > 1 ? "Runs:\n\n" : "Run: ";
  for (size_t i = 0; i < runs.size(); ++i) {
    const Json& run = runs[i];
    md += (runs.size() > 1 ? std::to_string(i + 1) + ". " : "") + run.value(field::gpu, "?") + " · commit " +
          run.value(field::commit, "?") + " · " + run.value(field::date, "?") +
          (run.contains(field::run) ? " · run " + run.value(field::run, "?") : std::string()) + " · `" +
          run.value(field::command, "?") + "`\n";
  }
  return md;
}

}  // namespace lmscale
