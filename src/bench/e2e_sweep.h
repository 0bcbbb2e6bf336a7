// The end-to-end sweep behind `lmscale bench`: every config of the grid (e2e_grid.h) run by run_e2e,
// the PyTorch baselines (e2e_torch_baseline.h) measured in the same invocation, size by size
// (lmscale's configs of a size, then one Python process per baseline for them), a progress line per
// cell with elapsed time and ETA (sweep_progress.h), and every result appended to <out>/e2e.jsonl
// and rendered into <out>/e2e.md (e2e_tables.h) as it arrives. A cell that fails (out of memory, a
// failed capture, an error, a baseline that died) is recorded and the sweep goes on.
#pragma once
#include <string>

#include "bench/e2e_grid.h"
#include "bench/e2e_warmup.h"  // `lmscale bench --warmup-study`, the other job of the subcommand

namespace lmscale {

struct SweepOutcome {
  std::string table;    // the table `lmscale bench` prints (comparison with baselines, else details)
  size_t cells = 0;     // cells in the sweep (configs × impls)
  size_t failures = 0;  // cells that failed other than by running out of memory (exit non-zero)
};

// Runs the sweep, appends records to <out>/e2e.jsonl, writes <out>/e2e.md.
SweepOutcome run_e2e_sweep(const E2ESweep& sweep);

}  // namespace lmscale
