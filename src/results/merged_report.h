// `lmscale report`'s work: merge the records of result folders into one folder, rebuild every
// table from the merged records (never copied from a run): one per .jsonl, plus the named tables of
// tables.json (results/views.h); draw the plots (`python -m lmscale.plots report`) and write an index
// linking every table, plot and file, with the pages no record stands behind marked as such.
#pragma once
#include <string>
#include <vector>

#include "results/record.h"

namespace lmscale {

struct ReportOptions {
  std::vector<std::string> inputs;  // result folders (the --out of benchmark runs), searched recursively
  std::string out = "docs/results";
  bool plots = true;
};

struct ReportSummary {
  size_t kept_records = 0;   // records the output folder already held
  size_t new_records = 0;    // records added to the output folder
  size_t skipped_lines = 0;  // damaged lines skipped (warned about with file:line), output and inputs
  size_t moved_lines = 0;    // of those, lines of the output folder moved to <file>.jsonl.damaged
  std::vector<std::string> damaged_files;  // the .damaged files written (relative to the folder)
  std::vector<std::string> empty_inputs;   // --in folders that hold no record (warned about)
  size_t newer_records = 0;  // records of a newer schema, passed through unchanged
  std::vector<std::string> tables, plots, files;  // what the folder holds, relative to it
  std::vector<std::string> named_tables;           // rebuilt from the selections of tables.json
  std::vector<std::string> empty_views;            // named tables that selected no record (not written)
  std::vector<std::string> other;                  // files and folders report did not make (pages, logs)
  std::string plot_problem;  // why the plots were not drawn ("" when they were, or were not asked for)
};

// Merges, rebuilds, plots and indexes; progress goes to stdout, warnings to stderr. Never deletes:
// a line of the output folder's records that is not a record is moved to <file>.jsonl.damaged beside
// it (named in the message); links inside --in folders are skipped, never followed. Throws UsageError
// for a missing --in or an --out that cannot be written (before anything is read), ResultWriteError
// when something could not be written.
ReportSummary write_report(const ReportOptions& options);

}  // namespace lmscale
