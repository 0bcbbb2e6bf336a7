// What an end-to-end sweep has measured (results per impl and config, which invocation measured each)
// and the tables rendered from it: the per-phase table, the side-by-side comparison with the PyTorch
// baselines, and the whole e2e.md page.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "bench/e2e_grid.h"
#include "results/table.h"

namespace lmscale {

struct SweepResults {
  std::vector<E2EConfig> configs;  // in sweep order (e2e_grid.h)
  std::vector<std::string> impls;  // "lmscale" first, then the baselines
  // results[impl][config], empty until that cell reported.
  std::vector<std::vector<std::optional<E2EResult>>> results;
  // The invocation (its start date) that measured each result, parallel to results: a ratio is fair
  // only between two results of one invocation, on one machine; --resume can join several.
  std::vector<std::vector<std::string>> run_of;
  size_t resumed = 0;           // results taken from an earlier run (--resume)
  std::string resumed_commits;  // their commits

  SweepResults(std::vector<E2EConfig> configs, std::vector<std::string> impls);
  bool across_runs(size_t k, size_t i) const { return run_of[0][i] != run_of[k][i]; }
  // Where the impls that compile sit (0 when none is compared): their compile time gets a column.
  std::vector<size_t> compiling_impls() const;
  // Cells that failed (capture-failed, error): what makes the run exit non-zero.
  size_t failures() const;
};

// One row per config and impl, every phase.
MarkdownTable detail_table(const SweepResults& results);
// With baselines: one row per config, the step time of every impl side by side, the ratios, the
// compile time that landed in that config's warm-up, and peak memory.
MarkdownTable compare_table(const SweepResults& results);
// The table `lmscale bench` prints: the comparison when there are baselines, else the details.
MarkdownTable sweep_table(const E2ESweep& sweep, const SweepResults& results);
// The whole e2e.md page: provenance, how the baselines ran, the tables, failed cells with reasons,
// cells not to be trusted (noise guard, core/stats.h) with the command that measures them properly.
// Says only what the results say (a CUDA graph only where a cell replayed one).
std::string sweep_markdown(const E2ESweep& sweep, const SweepResults& results);
// Writes <out>/e2e.md under the folder's lock, from the records on disk: this run's page, then every
// record of other runs that wrote to the same e2e.jsonl (two sweeps at once: the last writer's page
// holds both runs' rows).
void write_sweep_page(const E2ESweep& sweep, const SweepResults& results);

}  // namespace lmscale
