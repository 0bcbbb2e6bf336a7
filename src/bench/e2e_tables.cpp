// Tables of an end-to-end sweep; see e2e_tables.h.
#include "bench/e2e_tables.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "bench/e2e_torch_baseline.h"
#include "core/device.h"
#include "results/reader.h"
#include "results/table.h"
#include "results/writer.h"

namespace lmscale {
namespace {

// A timed mean with its spread; ⚠ when the noise guard does not trust it (core/stats.h).
std::string cell_ms(const Summary& s) {
  return s.n ? fmt(s.mean, 2) + " ± " + fmt(s.std, 2) + (noise_problem(s).empty() ? "" : " ⚠") : "-";
}

// A cell that produced no numbers, as the tables say it (OOM in capitals, as the spec's tables do).
std::string status_cell(const E2EResult& r) { return r.status == Status::oom ? "OOM" : to_string(r.status); }

bool ok(const std::optional<E2EResult>& r) { return r && r->status == Status::ok; }

double extra_number(const E2EResult& r, const char* key) {
  return r.extra.is_object() && r.extra.contains(key) && r.extra[key].is_number() ? r.extra[key].get<double>() : 0.0;
}

std::vector<std::string> config_cells(const E2EConfig& c) {
  return {c.setup.model.name, std::to_string(c.setup.context), dtype_name(c.setup.precision), mode_name(c.mode),
          attention_backend_name(c.setup.model.attention)};
}

}  // namespace

SweepResults::SweepResults(std::vector<E2EConfig> c, std::vector<std::string> i)
    : configs(std::move(c)), impls(std::move(i)) {
  results.assign(impls.size(), std::vector<std::optional<E2EResult>>(configs.size()));
  run_of.assign(impls.size(), std::vector<std::string>(configs.size()));
}

std::vector<size_t> SweepResults::compiling_impls() const {
  std::vector<size_t> out;
  for (size_t k = 1; k < impls.size(); ++k)
    if (torch_baseline_compiles(impls[k])) out.push_back(k);
  return out;
}

size_t SweepResults::failures() const {
  size_t n = 0;
  for (const auto& per_impl : results)
    for (const auto& r : per_impl) n += r && is_failure(r->status);
  return n;
}

MarkdownTable detail_table(const SweepResults& st) {
  MarkdownTable table({"size", "context", "precision", "mode", "attention", "impl", "forward ms", "backward ms",
                       "optimizer ms", "step ms", "tokens/s", "MFU", "peak memory", "lmscale speedup"});
  for (size_t i = 0; i < st.configs.size(); ++i) {
    const auto& lm = st.results[0][i];
    const double lmscale_ms = ok(lm) ? lm->total.mean : 0;
    for (size_t k = 0; k < st.impls.size(); ++k) {
      const auto& r = st.results[k][i];
      if (!r) continue;
      const bool good = ok(r);
      std::vector<std::string> row = config_cells(st.configs[i]);
      row.insert(row.end(),
                 {st.impls[k], good ? cell_ms(r->forward) : "-", good ? cell_ms(r->backward) : "-",
                  good ? cell_ms(r->optimizer) : "-", good ? cell_ms(r->total) : status_cell(*r),
                  good ? fmt(r->tokens_per_s, 0) : "-", good && r->mfu > 0 ? fmt(100 * r->mfu, 1) + "%" : "-",
                  good && r->peak_bytes ? fmt_bytes(r->peak_bytes) : "-",
                  k > 0 && good && lmscale_ms > 0 ? fmt(r->total.mean / lmscale_ms, 2) + "×" : "-"});
      table.add_row(row);
    }
  }
  return table;
}

MarkdownTable compare_table(const SweepResults& st) {
  std::vector<std::string> head = {"size", "context", "precision", "mode", "attention"};
  for (const auto& impl : st.impls) head.push_back(impl + " ms");
  for (size_t k = 1; k < st.impls.size(); ++k) head.push_back("lmscale vs " + st.impls[k]);
  const std::vector<size_t> compiling = st.compiling_impls();
  for (size_t k : compiling) head.push_back(st.impls[k] + " compile s");
  for (const auto& impl : st.impls) head.push_back(impl + " peak");
  MarkdownTable table(head);
  for (size_t i = 0; i < st.configs.size(); ++i) {
    std::vector<std::string> row = config_cells(st.configs[i]);
    for (size_t k = 0; k < st.impls.size(); ++k) {
      const auto& r = st.results[k][i];
      row.push_back(!r ? "not run" : ok(r) ? fmt(r->total.mean, 2) + (noise_problem(r->total).empty() ? "" : " ⚠")
                                        : status_cell(*r));
    }
    const auto& lm = st.results[0][i];
    for (size_t k = 1; k < st.impls.size(); ++k) {
      const auto& r = st.results[k][i];
      const bool both = ok(lm) && ok(r) && lm->total.mean > 0;
      row.push_back(both ? fmt(r->total.mean / lm->total.mean, 2) + "×" + (st.across_runs(k, i) ? " †" : "") : "-");
    }
    for (size_t k : compiling) {
      const auto& r = st.results[k][i];
      std::string cell = "-";
      if (r && extra_number(*r, "compile_s") > 0.05) cell = fmt(extra_number(*r, "compile_s"), 1);
      if (r && extra_number(*r, "compiled_in_timed_steps") > 0)
        cell += " (compiled in " + fmt(extra_number(*r, "compiled_in_timed_steps"), 0) + " timed steps)";
      row.push_back(cell);
    }
    for (size_t k = 0; k < st.impls.size(); ++k) {
      const auto& r = st.results[k][i];
      row.push_back(!r ? "-" : !ok(r) ? status_cell(*r) : r->peak_bytes ? fmt_bytes(r->peak_bytes) : "-");
    }
    table.add_row(row);
  }
  return table;
}

MarkdownTable sweep_table(const E2ESweep& s, const SweepResults& st) {
  return s.baselines.empty() ? detail_table(st) : compare_table(st);
}

namespace {

// Every cell that did not produce numbers, with its reason: the table cell has room for one word.
MarkdownTable failure_table(const SweepResults& st) {
  MarkdownTable table({"size", "context", "precision", "mode", "attention", "impl", "status", "reason"});
  for (size_t i = 0; i < st.configs.size(); ++i)
    for (size_t k = 0; k < st.impls.size(); ++k) {
      const auto& r = st.results[k][i];
      if (!r || r->status == Status::ok) continue;
      std::vector<std::string> row = config_cells(st.configs[i]);
      row.insert(row.end(), {st.impls[k], to_string(r->status), r->reason.empty() ? "-" : r->reason});
      table.add_row(row);
    }
  return table;
}

// Cells whose step time the noise guard does not trust, each with why and the command that measures
// it properly (more timed steps; on an idle machine).
MarkdownTable noisy_table(const E2ESweep& s, const SweepResults& st) {
  MarkdownTable table({"size", "context", "precision", "mode", "attention", "impl", "why", "measure it with"});
  const int steps = std::max(4 * kTrustedSteps, s.base.steps);
  for (size_t i = 0; i < st.configs.size(); ++i)
    for (size_t k = 0; k < st.impls.size(); ++k) {
      const auto& r = st.results[k][i];
      if (!ok(r) || noise_problem(r->total).empty()) continue;
      const E2EConfig& c = st.configs[i];
      std::vector<std::string> row = config_cells(c);
      const std::string cmd = "`lmscale bench --size " + c.setup.model.name + " --context " +
                              std::to_string(c.setup.context) + " --precision " + dtype_name(c.setup.precision) +
                              " --mode " + mode_name(c.mode) + " --attention " +
                              attention_backend_name(c.setup.model.attention) + " --device " + c.setup.device.str() +
                              " --impl " + st.impls[k] + " --steps " + std::to_string(steps) + "`";
      row.insert(row.end(), {st.impls[k], noise_problem(r->total), cmd});
      table.add_row(row);
    }
  return table;
}

// What the results say about CUDA graphs: only the cells that replayed one.
std::string cuda_graph_words(const SweepResults& st) {
  size_t graphed = 0, measured = 0;
  for (const auto& r : st.results[0])
    if (ok(r)) {
      ++measured;
      graphed += r->cuda_graph;
    }
  if (graphed == 0) return "";
  if (graphed == measured) return ", whole step replayed as a CUDA graph";
  return ", whole step replayed as a CUDA graph in " + std::to_string(graphed) + " of " + std::to_string(measured) +
         " lmscale cells (the others ran eagerly: see their notes)";
}

// How the baselines ran: one line per impl, and the compile time per size of the compiling ones.
void describe_baselines(std::ostringstream& md, const E2ESweep& s, const SweepResults& st) {
  md << "- PyTorch baselines: `python -m lmscale.baseline.e2e` (python/lmscale/baseline/e2e.py), the same model "
     << "and step (fused AdamW on CUDA, autocast over fp32 weights, forward under no_grad), timed the same way; per "
     << "size, lmscale's configs first, then one Python process per baseline for that size's configs (so a size's "
     << "ratios come from one invocation); the model is built once per size (a fresh optimizer per config); "
     << "baseline scope `" << s.baseline_scope << "`\n";
  for (const auto& impl : s.baselines) md << "- " << impl << ": " << torch_baseline_description(impl, s.baseline_scope);
  for (size_t k : st.compiling_impls()) {
    // Compile time lands in the first config of each size that needs a new graph.
    std::vector<std::pair<std::string, double>> by_size;
    for (size_t i = 0; i < st.configs.size(); ++i) {
      if (!st.results[k][i]) continue;
      const std::string& name = st.configs[i].setup.model.name;
      if (by_size.empty() || by_size.back().first != name) by_size.push_back({name, 0.0});
      by_size.back().second += extra_number(*st.results[k][i], "compile_s");
    }
    if (by_size.empty()) continue;
    md << "- " << st.impls[k] << " compile time (warm-up, never timed) per size:";
    for (size_t i = 0; i < by_size.size(); ++i)
      md << (i ? ", " : " ") << by_size[i].first << " " << fmt(by_size[i].second, 1) << " s";
    md << "\n";
  }
}

}  // namespace

std::string sweep_markdown(const E2ESweep& s, const SweepResults& st) {
  std::ostringstream md;
  md << "# End-to-end benchmark\n\n"
     << "- command: `" << run_info().command << "`\n- date: " << run_info().date << " (run " << run_info().run
     << ")\n- commit: " << run_info().commit
     << "\n- device: " << run_info().gpu << "\n- batch " << s.base.setup.batch << ", warm-up " << s.base.warmup
     << ", timed steps " << s.base.steps << cuda_graph_words(st)
     << "\n- times: mean ± std over timed steps; lmscale speedup = baseline step time / lmscale step time\n";
  if (st.resumed)
    md << "- resumed (--resume): " << st.resumed << " results were measured by an earlier run of this sweep "
       << "(commit " << st.resumed_commits << ") and read back from e2e.jsonl\n";
  size_t crossed = 0;
  for (size_t k = 1; k < st.impls.size(); ++k)
    for (size_t i = 0; i < st.configs.size(); ++i) crossed += st.results[k][i] && st.across_runs(k, i);
  if (crossed)
    md << "- **† " << crossed << " ratios compare results of different invocations** (a resumed sweep, possibly "
       << "another machine): launch-bound configs (small models) vary between machines by more than the ratio "
       << "says; measure them again in one run before quoting them\n";
  const MarkdownTable failed = failure_table(st);
  if (s.baselines.empty()) {
    md << "\n" << detail_table(st).render();
  } else {
    describe_baselines(md, s, st);
    md << "- lmscale vs X = X's step time / lmscale's step time (> 1: lmscale faster); OOM cells ran out of memory\n\n"
       << "## Step time (ms)\n\n"
       << compare_table(st).render() << "\n## Per phase\n\n"
       << detail_table(st).render();
  }
  if (!failed.empty()) md << "\n## Cells without numbers\n\n" << failed.render();
  const MarkdownTable noisy = noisy_table(s, st);
  if (!noisy.empty())
    md << "\n## ⚠ Cells not to be trusted\n\n"
       << "Their step time spreads by more than " << fmt(100 * kNoisySpread, 0) << " % or rests on fewer than "
       << kTrustedSteps << " timed steps (a contended CPU, too short a run). The records carry the CPU's thread count "
       << "and load (cpu_threads, load). Measure them again on an idle machine:\n\n"
       << noisy.render();
  return md.str();
}

void write_sweep_page(const E2ESweep& s, const SweepResults& st) {
  const std::string jsonl = s.out_dir + "/e2e.jsonl";
  const FolderLock lock(s.out_dir, "e2e");  // concurrent sweeps take turns; each reads what all wrote
  std::string page = sweep_markdown(s, st);
  std::set<std::string> shown;  // the runs this page's tables already hold (this one, resumed ones)
  shown.insert(run_info().run);
  for (const auto& per_impl : st.run_of) shown.insert(per_impl.begin(), per_impl.end());
  std::vector<Json> others;
  if (std::ifstream(jsonl).good()) {
    std::ostringstream quiet;  // damaged lines are the sweep's own business (report moves them aside)
    for (auto& r : read_records(jsonl, nullptr, &quiet))
      if (!shown.count(r.value("run", r.value("date", "") + " " + r.value("command", "")))) others.push_back(std::move(r));
  }
  if (!others.empty())
    page += "\n# Other runs in this folder\n\nRecords of e2e.jsonl written by other invocations (another sweep "
            "writing here at the same time, or earlier runs), rebuilt from the file:\n\n" +
            records_table("Every record of the other runs", others);
  write_text(s.out_dir + "/e2e.md", page);
}

}  // namespace lmscale
