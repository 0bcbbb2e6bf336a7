// Markdown tables: MarkdownTable (rows of formatted cells) and records_table, a table rebuilt from
// records alone (what `lmscale report` writes for every benchmark): one row per measured cell, one
// column per metric. Fields equal in every row are said once above the table; the runs (gpu,
// commit, date, command) are listed and rows point at them.
#pragma once
#include <string>
#include <vector>

#include "results/record.h"

namespace lmscale {

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

// Records of one benchmark file (any schema, normalised by read_records) → a markdown section with
// a `## title` heading.
std::string records_table(const std::string& title, const std::vector<Json>& records);

}  // namespace lmscale
