// The run loop of the end-to-end sweep; see e2e_sweep.h.
#include "bench/e2e_sweep.h"

#include <chrono>
#include <iostream>

#include "bench/e2e_resume.h"
#include "bench/e2e_tables.h"
#include "bench/e2e_torch_baseline.h"
#include "core/interrupt.h"
#include "core/sweep_progress.h"
#include "results/table.h"
#include "results/writer.h"

namespace lmscale {
namespace {

std::string outcome(const E2EResult& r) {
  std::string s = r.status == Status::ok ? fmt(r.total.mean, 2) + " ms" : to_string(r.status);
  if (r.extra.is_object() && r.extra.contains("compile_s") && r.extra["compile_s"].is_number() &&
      r.extra["compile_s"].get<double>() > 0.05)
    s += " (compiled in warm-up: " + fmt(r.extra["compile_s"].get<double>(), 1) + " s)";
  return s;
}

}  // namespace

SweepOutcome run_e2e_sweep(const E2ESweep& s) {
  std::vector<std::string> impls = {"lmscale"};
  impls.insert(impls.end(), s.baselines.begin(), s.baselines.end());
  SweepResults st(sweep_configs(s), impls);
  check_output_folder(s.out_dir);  // before the first measurement, not after it
  const std::string jsonl = s.out_dir + "/e2e.jsonl", md = s.out_dir + "/e2e.md";
  const size_t total = st.configs.size() * st.impls.size();
  SweepProgress progress(total);
  size_t kept = 0;
  if (s.resume) {
    const ResumeCount resumed = resume_from(jsonl, st);
    kept = resumed.kept;
    progress.skip(kept);
    std::cerr << "resume: " << kept << " of " << total << " results already in " << jsonl;
    if (resumed.incomplete)
      std::cerr << "; " << resumed.incomplete << " incomplete (records missing: the run was cut between two writes) "
                << "measured again";
    std::cerr << "\n";
  }
  // What a SIGTERM/SIGINT leaves (core/interrupt.h): the line it prints says so and how to go on.
  const std::string& cmd = run_info().command;
  const std::string resume_cmd = cmd.find(" --resume") == std::string::npos ? cmd + " --resume" : cmd;
  auto note_kept = [&] {
    set_interrupt_note(std::to_string(kept) + " of " + std::to_string(total) + " cells are kept in " + jsonl +
                       " (the cell in progress is not); continue with: " + resume_cmd);
  };
  note_kept();
  // Each result is appended (one write per cell) and the page rebuilt as it arrives, so a sweep cut
  // short (time limit, crash, signal) keeps what it measured; a failed cell says why on its own line.
  auto keep = [&](size_t k, size_t i, const E2EResult& r) {
    if (r.status != Status::ok && !r.reason.empty()) std::cerr << "    " << r.reason << "\n";
    print_capture_note(r);
    {
      const DeferInterrupts appended_and_counted;  // a signal now ends the run after both, never between
      append_jsonl(jsonl, e2e_records(st.configs[i], r, st.impls[k]));
      ++kept;
      note_kept();
    }
    st.results[k][i] = r;
    st.run_of[k][i] = run_info().run;
    write_sweep_page(s, st);
  };
  // Size by size: lmscale's configs, then each baseline's, so a time limit that cuts the sweep leaves
  // whole sizes measured in one invocation (configs are ordered size first).
  for (size_t lo = 0, hi = 0; lo < st.configs.size(); lo = hi) {
    const std::string& size = st.configs[lo].setup.model.name;
    for (hi = lo; hi < st.configs.size() && st.configs[hi].setup.model.name == size;) ++hi;
    // Wall time per impl for this size, printed when the size is done: what plans the split of a
    // sweep over time-limited calls (scripts/gpu/e2e_grid.sh runs one size per call).
    std::string timing;
    auto clock_start = std::chrono::steady_clock::now();
    auto lap = [&](const std::string& impl) {
      const auto now = std::chrono::steady_clock::now();
      timing += (timing.empty() ? "" : ", ") + impl + " " +
                fmt(std::chrono::duration<double>(now - clock_start).count(), 0) + " s";
      clock_start = now;
    };
    bool measured = false;
    for (size_t i = lo; i < hi; ++i) {
      if (st.results[0][i]) continue;
      measured = true;
      progress.begin(config_label(st.configs[i]) + " lmscale");
      const E2EResult r = run_e2e(st.configs[i]);
      progress.end(r.status, outcome(r));
      keep(0, i, r);
    }
    if (measured) lap("lmscale");
    for (size_t k = 1; k < st.impls.size(); ++k) {
      const std::string& impl = st.impls[k];
      std::vector<E2EConfig> todo;  // this size's configs without a result yet, and where they sit in the sweep
      std::vector<size_t> where;
      for (size_t i = lo; i < hi; ++i)
        if (!st.results[k][i]) {
          todo.push_back(st.configs[i]);
          where.push_back(i);
        }
      if (todo.empty()) continue;
      std::cerr << impl << ": one Python process for " << size << "'s " << todo.size() << " configs";
      if (torch_baseline_compiles(impl)) std::cerr << " (compilation in warm-up)";
      std::cerr << " ...\n" << std::flush;
      progress.restart_clock();
      run_torch_baselines(todo, impl, s.baseline_scope, [&](size_t t, const E2EResult& r) {
        const size_t i = where[t];
        progress.report(config_label(st.configs[i]) + " " + impl, r.status, outcome(r));
        keep(k, i, r);
      });
      lap(impl);
    }
    if (!timing.empty()) std::cerr << size << " done: " << timing << "\n";
  }
  write_sweep_page(s, st);
  set_interrupt_note("");
  std::cerr << "sweep: " << total << " cells in " << clock_time(progress.elapsed_s()) << "\n";
  return {sweep_table(s, st).render(), total, st.failures()};
}

}  // namespace lmscale
