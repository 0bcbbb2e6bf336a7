// `lmscale bench`'s run: checks, then the sweep, the warm-up study or the ablation (see e2e_command.h).
#include "bench/e2e_command.h"

#include <iostream>

#include "bench/e2e_ablate.h"
#include "bench/e2e_sweep.h"
#include "bench/e2e_torch_baseline.h"
#include "bench/e2e_warmup.h"
#include "core/device.h"
#include "core/error.h"

namespace lmscale {

void run_e2e_command(const E2ESweep& s, E2EJob job) {
  TORCH_CHECK(!s.models.empty() && !s.contexts.empty() && !s.precisions.empty() && !s.modes.empty() &&
                  !s.backends.empty(),
              "lmscale bench: the grid needs at least one size, context, precision, mode and attention backend");
  for (const auto& b : s.baselines) check_torch_baseline(b);
  check_baseline_scope(s.baseline_scope);
  for (const auto& m : s.models)
    for (auto t : s.contexts)
      for (auto p : s.precisions)
        for (auto b : s.backends)  // every cell checked before the first measurement: a refusal is a usage error
          check_as_usage([&] { validate(sweep_config(s, m, t, p, s.modes.front(), b).setup); });
  set_run_gpu(device_name(s.base.setup.device));
  const std::string& out = s.out_dir;
  if (job == E2EJob::WarmupStudy) {
    const E2EConfig c =
        sweep_config(s, s.models.front(), s.contexts.front(), s.precisions.front(), s.modes.front(), s.backends.front());
    std::cout << run_warmup_study(c, out) << "\nwrote " << out << "/e2e_warmup.{jsonl,md}\n";
    return;
  }
  if (job == E2EJob::Ablation) {  // one table per run: each fast-path piece added in turn
    std::vector<E2EConfig> bases;
    for (const auto& m : s.models)
      for (auto t : s.contexts)
        for (auto p : s.precisions) bases.push_back(sweep_config(s, m, t, p, s.modes.front(), s.backends.front()));
    std::cout << run_ablation(bases, out) << "\nwrote " << out << "/e2e_ablate.{jsonl,md}\n";
    return;
  }
  const SweepOutcome done = run_e2e_sweep(s);
  std::cout << done.table << "\nwrote " << out << "/e2e.{jsonl,md}\n";
  TORCH_CHECK(done.failures == 0, done.failures, " of ", done.cells,
              " cells failed (out of memory does not count): their reasons are in ", out, "/e2e.md");
}

}  // namespace lmscale
