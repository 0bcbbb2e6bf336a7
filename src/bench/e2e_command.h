// What `lmscale bench` runs once its flags are parsed: the grid checked whole before anything runs,
// then one of its three jobs — the sweep (e2e_sweep.h), the warm-up study (e2e_warmup.h) or the
// fast-path ablation (e2e_ablate.h) — with its table printed. src/cli/bench.cpp only fills the grid.
#pragma once
#include "bench/e2e_grid.h"

namespace lmscale {

enum class E2EJob { Sweep, WarmupStudy, Ablation };

// Called once per `lmscale bench`. Checks the baselines and the baseline scope, validates every
// point of the grid before the first runs (a typo fails in a second, not an hour in), names the
// run's GPU for the records, runs the job over <sweep.out_dir> and prints its table. The warm-up
// study runs the grid's first point; the ablation each (size, context, precision) with the first
// mode and backend. Throws when a sweep cell failed other than by running out of memory.
void run_e2e_command(const E2ESweep& sweep, E2EJob job);

}  // namespace lmscale
