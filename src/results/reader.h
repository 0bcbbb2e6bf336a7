// The tolerant reader of results: the records of a .jsonl file in today's schema, surviving damage
// (a line cut short, garbage, a merge conflict is skipped with file:line and reading goes on).
// normalize_record maps records of older schema versions to today's names (SCHEMA.md).
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "results/record.h"

namespace lmscale {

// Reads every record of a .jsonl file (blank lines skipped; a malformed line throws naming it).
// For tests and tools that want to stop at damage; readers of result folders use read_records.
std::vector<Json> read_jsonl(const std::string& path);

// What read_records saw in one or more files.
struct ReadStats {
  size_t records = 0;  // records returned
  size_t skipped = 0;  // damaged lines skipped (warned about with file:line, kWarningsPerFile per file)
  size_t newer = 0;    // records of a newer schema, passed through unchanged
};
// A line that is not a record, as it was in the file (so a caller can keep it: report never drops one).
struct DamagedLine {
  size_t line = 0;   // 1-based
  std::string text;  // the line without its newline
};
// Warnings about damaged lines per file; past this, one line says how many more there were.
inline constexpr size_t kWarningsPerFile = 5;
// Reads the records of a .jsonl file, surviving damage: a line that is not a JSON object is skipped
// with a warning naming file:line on `warnings` (a truncated last line, garbage, a merge conflict),
// and reading goes on; with `damaged`, the skipped lines are handed back as they were. Records are
// returned in today's schema (normalize_record); records of a newer schema are kept unchanged. A
// missing file throws. Counts are added to *stats.
std::vector<Json> read_records(const std::string& path, ReadStats* stats = nullptr, std::ostream* warnings = nullptr,
                               std::vector<DamagedLine>* damaged = nullptr);

// A record in today's schema: version-1 names (dtype, seq, OOM, message, …; SCHEMA.md lists them)
// mapped to today's. A record of a newer schema than kSchemaVersion is returned unchanged.
Json normalize_record(Json record);

}  // namespace lmscale
