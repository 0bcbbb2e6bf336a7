// A markdown table rebuilt from records alone (what `lmscale report` writes for every benchmark):
// one row per measured cell, one column per metric. Fields equal in every row are said once above
// the table; the runs (gpu, commit, date, command) are listed and rows point at them.
#pragma once
#include <string>
#include <vector>

#include "core/results.h"

namespace lmscale {

// Records of one benchmark file (any schema, normalised by read_records) → a markdown section with
// a `## title` heading.
std::string records_table(const std::string& title, const std::vector<Json>& records);

}  // namespace lmscale
