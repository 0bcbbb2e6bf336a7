// End-to-end sweep, warm-up study and PyTorch baselines; see e2e_sweep.h.
#include "bench/e2e_sweep.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "core/device.h"
#include "core/error.h"

namespace lmscale {
namespace {

std::string python_exe() {
  if (const char* p = std::getenv("LMSCALE_PYTHON"); p && *p) return p;
  return "python3";
}

std::string baseline_script() {
  if (const char* p = std::getenv("LMSCALE_BASELINE_SCRIPT"); p && *p) return p;
  return std::string(LMSCALE_SOURCE_DIR) + "/scripts/torch_baseline.py";
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

// A Summary from JSON: the script's phase objects name the mean "mean"; lmscale's own metric records
// (e2e_records) name it "value".
Summary summary_from(const Json& j, const char* mean_key = "mean") {
  Summary s;
  if (!j.is_object()) return s;
  s.mean = j.value(mean_key, 0.0);
  s.std = j.value("std", 0.0);
  s.median = j.value("median", 0.0);
  s.min = j.value("min", 0.0);
  s.max = j.value("max", 0.0);
  s.n = j.value("n", 0);
  return s;
}

std::string cell_ms(const Summary& s) { return s.n ? fmt(s.mean, 2) + " ± " + fmt(s.std, 2) : "-"; }

// One line of the script's batch input: the config in the script's terms, plus its index.
Json baseline_config_line(const E2EConfig& c, size_t id) {
  const auto& m = c.setup.model;
  return Json{{"id", id},
              {"size", m.name},
              {"vocab", m.vocab_size},
              {"d_model", m.d_model},
              {"d_ff", m.d_ff},
              {"layers", m.num_layers},
              {"heads", m.num_heads},
              {"context", c.setup.context},
              {"model_context", m.context_length > 0 ? m.context_length : c.setup.context},
              {"batch", c.setup.batch},
              {"precision", dtype_name(c.setup.precision)},
              {"mode", mode_name(c.mode)},
              {"attention", attention_backend_name(m.attention)},
              {"warmup", c.warmup},
              {"steps", c.steps},
              {"device", c.setup.device.str()}};
}

// Fields only baseline results have; they go to E2EResult::extra and from there into every record.
constexpr const char* kBaselineExtras[] = {"compile_s",        "graphs_compiled", "compiled_in_timed_steps",
                                           "compile_scope",    "dynamic_shapes",  "warmup_steps_run",
                                           "torch_attention", "wall_s"};

// The script's result line in lmscale's terms; fields only baselines have go to `extra`.
E2EResult baseline_result(const Json& j, const E2EConfig& c) {
  E2EResult r;
  r.status = j.value("status", "error");
  r.message = j.value("message", "");
  r.params = c.setup.model.param_count();
  for (const char* key : kBaselineExtras)
    if (j.contains(key) && !j[key].is_null()) r.extra[key] = j[key];
  if (r.status != "ok") return r;
  r.forward = summary_from(j.value("forward_ms", Json()));
  r.backward = summary_from(j.value("backward_ms", Json()));
  r.optimizer = summary_from(j.value("optimizer_ms", Json()));
  r.total = summary_from(j.value("step_ms", Json()));
  r.step_ms = j.value("all_step_ms", std::vector<double>{});
  r.peak_bytes = j.value("peak_memory_bytes", int64_t{0});
  if (r.total.mean > 0) r.tokens_per_s = c.setup.batch * c.setup.context / (r.total.mean / 1e3);
  return r;
}

}  // namespace

std::vector<E2EResult> run_torch_baselines(const std::vector<E2EConfig>& configs, const std::string& impl,
                                           const std::function<void(size_t, const E2EResult&)>& on_result,
                                           const std::string& compile_scope) {
  TORCH_CHECK(impl == "torch-eager" || impl == "torch-compile", "--compare '", impl,
              "' is not a baseline: use torch-eager or torch-compile");
  TORCH_CHECK(compile_scope == "blocks" || compile_scope == "model", "--compile-scope '", compile_scope,
              "' is not a scope: use blocks or model");
  std::vector<E2EResult> out(configs.size());
  std::vector<bool> answered(configs.size(), false);
  if (configs.empty()) return out;
  // The configs go to the script as a file (popen gives one direction only): one JSON line each.
  std::string path = (std::filesystem::temp_directory_path() / "lmscale-baseline-XXXXXX").string();
  const int fd = mkstemp(path.data());
  TORCH_CHECK(fd >= 0, "cannot create a temporary file for the baseline configs in ",
              std::filesystem::temp_directory_path().string(), ": set TMPDIR to a writable folder");
  ::close(fd);  // mkstemp only reserved the name
  std::string text;
  for (size_t i = 0; i < configs.size(); ++i) text += baseline_config_line(configs[i], i).dump() + "\n";
  write_text(path, text);
  const std::string cmd = shell_quote(python_exe()) + " " + shell_quote(baseline_script()) + " --impl " +
                          (impl == "torch-eager" ? "eager" : "compile") + " --compile-scope " + compile_scope +
                          " --configs " + shell_quote(path) + " 2>&1";
  std::deque<std::string> tail;  // the script's last lines that were not results: the reason, if it dies
  int status = -1;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    std::array<char, 8192> buf{};
    std::string line;
    while (fgets(buf.data(), buf.size(), p)) {
      line += buf.data();
      if (line.back() != '\n' && !feof(p)) continue;  // a line longer than the buffer: keep reading
      while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
      bool consumed = false;
      if (!line.empty() && line.front() == '{') {
        try {
          const Json j = Json::parse(line);
          if (j.contains("id") && j["id"].is_number_unsigned() && j["id"].get<size_t>() < configs.size()) {
            const size_t i = j["id"].get<size_t>();
            out[i] = baseline_result(j, configs[i]);
            answered[i] = true;
            if (on_result) on_result(i, out[i]);
            consumed = true;
          }
        } catch (const std::exception&) {
        }
      }
      if (!consumed && !line.empty()) {
        std::cerr << "    [" << impl << "] " << line << "\n";
        tail.push_back(line);
        if (tail.size() > 8) tail.pop_front();
      }
      line.clear();
    }
    status = pclose(p);
  }
  std::filesystem::remove(path);
  std::string why;
  for (const auto& l : tail) why += (why.empty() ? "" : " | ") + l;
  for (size_t i = 0; i < configs.size(); ++i) {
    if (answered[i]) continue;
    out[i].status = "error";
    out[i].params = configs[i].setup.model.param_count();
    out[i].message = "the " + impl + " process (" + python_exe() + " " + baseline_script() + ", exit status " +
                     std::to_string(status) + ") gave no result for this config" + (why.empty() ? "" : ": " + why);
    if (on_result) on_result(i, out[i]);
  }
  return out;
}

int64_t sweep_model_context(const E2ESweep& s) {
  int64_t t = s.model_context;
  if (t <= 0)
    for (auto c : s.contexts) t = std::max(t, c);
  return t;
}

E2EConfig sweep_config(const E2ESweep& s, const ModelConfig& model, int64_t context, c10::ScalarType precision,
                       BenchMode mode, AttentionBackend backend) {
  E2EConfig c = s.base;
  c.setup.model = model;
  c.setup.model.context_length = sweep_model_context(s);
  c.setup.model.attention = backend;
  c.setup.context = context;
  c.setup.precision = precision;
  c.mode = mode;
  return c;
}

namespace {

// What a sweep has measured so far: results[impl][config], empty until that run reported.
struct SweepState {
  std::vector<E2EConfig> configs;
  std::vector<std::string> impls;  // "lmscale" first, then the baselines
  std::vector<std::vector<std::optional<E2EResult>>> results;
  // The invocation (its start date) that measured each result, parallel to results: a ratio is fair
  // only between two results of one invocation, on one machine; --resume can join several.
  std::vector<std::vector<std::string>> run_of;
  size_t resumed = 0;           // results taken from an earlier run (--resume)
  std::string resumed_commits;  // their commits
  bool across_runs(size_t k, size_t i) const { return run_of[0][i] != run_of[k][i]; }
  // Where torch-compile sits among the impls (0: not compared).
  size_t compile_index() const {
    for (size_t k = 1; k < impls.size(); ++k)
      if (impls[k] == "torch-compile") return k;
    return 0;
  }
};

std::string config_label(const E2EConfig& c) {
  return c.setup.model.name + " ctx " + std::to_string(c.setup.context) + " " + dtype_name(c.setup.precision) + " " +
         mode_name(c.mode) + " " + attention_backend_name(c.setup.model.attention);
}

std::string status_cell(const E2EResult& r) { return r.status == "oom" ? "OOM" : r.status; }

double extra_number(const E2EResult& r, const char* key) {
  return r.extra.is_object() && r.extra.contains(key) && r.extra[key].is_number() ? r.extra[key].get<double>() : 0.0;
}

// One row per config and impl, every phase (the table `lmscale bench` has always written).
MarkdownTable detail_table(const SweepState& st) {
  MarkdownTable table({"size", "context", "precision", "mode", "attention", "impl", "forward ms", "backward ms",
                       "optimizer ms", "step ms", "tokens/s", "MFU", "peak memory", "lmscale speedup"});
  for (size_t i = 0; i < st.configs.size(); ++i) {
    const E2EConfig& c = st.configs[i];
    const auto& lm = st.results[0][i];
    const double lmscale_ms = lm && lm->status == "ok" ? lm->total.mean : 0;
    for (size_t k = 0; k < st.impls.size(); ++k) {
      if (!st.results[k][i]) continue;
      const E2EResult& r = *st.results[k][i];
      const bool ok = r.status == "ok";
      std::string speedup = "-";
      if (k > 0 && ok && lmscale_ms > 0) speedup = fmt(r.total.mean / lmscale_ms, 2) + "×";
      table.add_row({c.setup.model.name, std::to_string(c.setup.context), dtype_name(c.setup.precision),
                     mode_name(c.mode), attention_backend_name(c.setup.model.attention), st.impls[k],
                     ok ? cell_ms(r.forward) : "-", ok ? cell_ms(r.backward) : "-", ok ? cell_ms(r.optimizer) : "-",
                     ok ? cell_ms(r.total) : status_cell(r), ok ? fmt(r.tokens_per_s, 0) : "-",
                     ok && r.mfu > 0 ? fmt(100 * r.mfu, 1) + "%" : "-",
                     ok && r.peak_bytes ? fmt_bytes(r.peak_bytes) : "-", speedup});
    }
  }
  return table;
}

// With baselines: one row per config, step time of every impl side by side, the ratios, the
// compile time that landed in that config's warm-up, and peak memory.
MarkdownTable compare_table(const SweepState& st) {
  std::vector<std::string> head = {"size", "context", "precision", "mode", "attention"};
  for (const auto& impl : st.impls) head.push_back(impl + " ms");
  for (size_t k = 1; k < st.impls.size(); ++k) head.push_back("lmscale vs " + st.impls[k]);
  const size_t compile_k = st.compile_index();
  if (compile_k) head.push_back("compile s");
  for (const auto& impl : st.impls) head.push_back(impl + " peak");
  MarkdownTable table(head);
  for (size_t i = 0; i < st.configs.size(); ++i) {
    const E2EConfig& c = st.configs[i];
    std::vector<std::string> row = {c.setup.model.name, std::to_string(c.setup.context), dtype_name(c.setup.precision),
                                    mode_name(c.mode), attention_backend_name(c.setup.model.attention)};
    for (size_t k = 0; k < st.impls.size(); ++k) {
      const auto& r = st.results[k][i];
      row.push_back(!r ? "not run" : r->status == "ok" ? fmt(r->total.mean, 2) : status_cell(*r));
    }
    const auto& lm = st.results[0][i];
    for (size_t k = 1; k < st.impls.size(); ++k) {
      const auto& r = st.results[k][i];
      const bool both = lm && r && lm->status == "ok" && r->status == "ok" && lm->total.mean > 0;
      row.push_back(both ? fmt(r->total.mean / lm->total.mean, 2) + "×" + (st.across_runs(k, i) ? " †" : "") : "-");
    }
    if (compile_k) {
      const auto& r = st.results[compile_k][i];
      std::string cell = "-";
      if (r && extra_number(*r, "compile_s") > 0.05) cell = fmt(extra_number(*r, "compile_s"), 1);
      if (r && extra_number(*r, "compiled_in_timed_steps") > 0)
        cell += " (compiled in " + fmt(extra_number(*r, "compiled_in_timed_steps"), 0) + " timed steps)";
      row.push_back(cell);
    }
    for (size_t k = 0; k < st.impls.size(); ++k) {
      const auto& r = st.results[k][i];
      row.push_back(r && r->status == "ok" && r->peak_bytes ? fmt_bytes(r->peak_bytes) : r ? status_cell(*r) : "-");
      if (r && r->status == "ok" && !r->peak_bytes) row.back() = "-";
    }
    table.add_row(row);
  }
  return table;
}

std::string sweep_markdown(const E2ESweep& s, const SweepState& st) {
  std::ostringstream md;
  md << "# End-to-end benchmark\n\n"
     << "- command: `" << run_info().command << "`\n- date: " << run_info().date << "\n- commit: " << run_info().commit
     << "\n- device: " << run_info().gpu << "\n- batch " << s.base.setup.batch << ", warm-up " << s.base.warmup
     << ", timed steps " << s.base.steps << (s.base.cuda_graph ? ", whole step replayed as a CUDA graph" : "")
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
  if (s.baselines.empty()) {
    md << "\n" << detail_table(st).render();
    return md.str();
  }
  // Compile time per size (it lands in the first config of each size × precision × grad mode).
  std::vector<std::pair<std::string, double>> compile_by_size;
  if (const size_t k = st.compile_index())
    for (size_t i = 0; i < st.configs.size(); ++i) {
      if (!st.results[k][i]) continue;
      const std::string& name = st.configs[i].setup.model.name;
      if (compile_by_size.empty() || compile_by_size.back().first != name) compile_by_size.push_back({name, 0.0});
      compile_by_size.back().second += extra_number(*st.results[k][i], "compile_s");
    }
  md << "- PyTorch baselines: `scripts/torch_baseline.py`, the same architecture and step (fused AdamW, autocast, "
     << "forward under no_grad), timed the same way; per size, lmscale's configs first, then one Python process "
     << "per baseline for that size's configs (so a size's ratios come from one invocation); the model is built once per size and reused (a fresh optimizer per config)\n";
  for (const auto& impl : s.baselines)
    if (impl == "torch-compile") {
      md << "- torch-compile: "
         << (s.compile_scope == "model" ? "the whole forward + loss compiled as one graph"
                                        : "each transformer block and the LM head + loss compiled (regional "
                                          "compilation: all blocks share one graph)")
         << ", default mode, **dynamic shapes: the context dimension is marked dynamic**, so all contexts share one "
         << "graph per precision × grad mode; compilation happens in warm-up (a step that compiled is never timed); "
         << "compile s = how much longer the compiling warm-up steps took than a timed step";
      if (!compile_by_size.empty()) {
        md << "; total per size:";
        for (size_t i = 0; i < compile_by_size.size(); ++i)
          md << (i ? ", " : " ") << compile_by_size[i].first << " " << fmt(compile_by_size[i].second, 1) << " s";
      }
      md << "\n";
    }
  md << "- lmscale vs X = X's step time / lmscale's step time (> 1: lmscale faster); OOM cells ran out of memory\n\n"
     << "## Step time (ms)\n\n"
     << compare_table(st).render() << "\n## Per phase\n\n"
     << detail_table(st).render();
  return md.str();
}

// Identifies a measurement in e2e.jsonl: config, impl and the run settings that change numbers.
std::string record_key(const Json& j) {
  Json k;
  for (const char* f : {"impl", "size", "d_model", "d_ff", "layers", "heads", "vocab", "context", "batch", "precision",
                        "mode", "attention", "device", "warmup", "steps", "cuda_graph", "gpu"})
    k[f] = j.contains(f) ? j[f] : Json();
  return k.dump();
}

std::string config_key(const E2EConfig& c, const std::string& impl) {
  E2EResult none;
  none.status = "oom";  // any non-ok status: one record with every config field
  return record_key(e2e_records(c, none, impl).front());
}

// A result read back from e2e.jsonl, with the invocation (date) and commit that measured it.
struct PreviousResult {
  E2EResult result;
  std::string date, commit;
};

// Results already in <out>/e2e.jsonl, by record_key; of several invocations the one appended last
// (the latest) wins. Lines that do not parse (a run killed mid-write) are skipped.
std::map<std::string, PreviousResult> previous_results(const std::string& path) {
  std::map<std::string, PreviousResult> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    Json j;
    try {
      j = Json::parse(line);
    } catch (const std::exception&) {
      continue;
    }
    if (!j.is_object() || j.value("bench", "") != "e2e" || !j.contains("metric")) continue;
    const std::string key = record_key(j), date = j.value("date", "");
    auto it = out.find(key);
    if (it != out.end() && it->second.date != date) out.erase(it);  // a newer run of the same config
    PreviousResult& prev = out[key];
    prev.date = date;
    prev.commit = j.value("commit", "");
    E2EResult& r = prev.result;
    r.status = j.value("status", "error");
    r.message = j.value("message", "");
    r.params = j.value("params", int64_t{0});
    const std::string metric = j["metric"];
    auto summary = [&] { return summary_from(j, "value"); };
    if (metric == "forward_ms") r.forward = summary();
    if (metric == "backward_ms") r.backward = summary();
    if (metric == "optimizer_ms") r.optimizer = summary();
    if (metric == "step_ms") r.total = summary();
    if (metric == "tokens_per_s") r.tokens_per_s = j.value("value", 0.0);
    if (metric == "mfu") r.mfu = j.value("value", 0.0);
    if (metric == "peak_memory_bytes") r.peak_bytes = static_cast<int64_t>(j.value("value", 0.0));
    if (metric == "all_step_ms") r.step_ms = j.value("value", std::vector<double>{});
    for (const char* x : kBaselineExtras)
      if (j.contains(x)) r.extra[x] = j[x];
  }
  return out;
}

}  // namespace

std::string run_e2e_sweep(const E2ESweep& s) {
  SweepState st;
  for (const auto& model : s.models)
    for (auto ctx : s.contexts)
      for (auto prec : s.precisions)
        for (auto mode : s.modes)
          for (auto backend : s.backends) st.configs.push_back(sweep_config(s, model, ctx, prec, mode, backend));
  st.impls = {"lmscale"};
  st.impls.insert(st.impls.end(), s.baselines.begin(), s.baselines.end());
  st.results.assign(st.impls.size(), std::vector<std::optional<E2EResult>>(st.configs.size()));
  st.run_of.assign(st.impls.size(), std::vector<std::string>(st.configs.size()));
  const size_t total = st.configs.size() * st.impls.size();
  size_t done = 0;
  if (s.resume) {
    std::set<std::string> commits;
    const auto previous = previous_results(s.out_dir + "/e2e.jsonl");
    for (size_t k = 0; k < st.impls.size(); ++k)
      for (size_t i = 0; i < st.configs.size(); ++i) {
        const std::string key = config_key(st.configs[i], st.impls[k]);
        auto it = previous.find(key);
        // Kept: OOM cells, and ok results with their step_ms record (a run killed while appending may
        // have left less). Errors are measured again.
        if (it == previous.end()) continue;
        const E2EResult& r = it->second.result;
        if (r.status == "oom" || (r.status == "ok" && r.total.n > 0)) {
          st.results[k][i] = r;
          st.run_of[k][i] = it->second.date;
          commits.insert(it->second.commit);
          ++done;
          ++st.resumed;
        }
      }
    for (const auto& c : commits) st.resumed_commits += (st.resumed_commits.empty() ? "" : ", ") + c;
    std::cerr << "resume: " << done << " of " << total << " results already in " << s.out_dir << "/e2e.jsonl\n";
  }
  auto keep = [&](size_t k, size_t i, const E2EResult& r) {
    // Appended per config, and the table rewritten, so a sweep cut short (time limit, crash) keeps
    // what it measured.
    append_jsonl(s.out_dir + "/e2e.jsonl", e2e_records(st.configs[i], r, st.impls[k]));
    st.results[k][i] = r;
    st.run_of[k][i] = run_info().date;
    write_text(s.out_dir + "/e2e.md", sweep_markdown(s, st));
  };
  auto outcome = [](const E2EResult& r) { return r.status == "ok" ? fmt(r.total.mean, 2) + " ms" : r.status; };
  auto progress = [&](size_t i, const std::string& impl) {  // counts one result and starts its line
    ++done;
    std::cerr << "[" << done << "/" << total << "] " << config_label(st.configs[i]) << " " << impl;
  };
  auto finish = [&](size_t k, size_t i, const E2EResult& r) {  // after its progress line
    if (r.status == "error") std::cerr << "    " << r.message << "\n";
    keep(k, i, r);
  };
  // Size by size: lmscale's configs, then each baseline's, so a time limit that cuts the sweep leaves
  // whole sizes measured in one invocation (configs are ordered size first).
  for (size_t lo = 0, hi = 0; lo < st.configs.size(); lo = hi) {
    const std::string& size = st.configs[lo].setup.model.name;
    for (hi = lo; hi < st.configs.size() && st.configs[hi].setup.model.name == size;) ++hi;
    // Wall time per impl for this size, printed when the size is done: what plans the next split of a
    // sweep over time-limited calls (E2E_SIZES in scripts/gpu/gpu_check.sh).
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
      progress(i, "lmscale");
      std::cerr << " ..." << std::flush;
      E2EResult r = run_e2e(st.configs[i]);
      std::cerr << " " << outcome(r) << "\n";
      finish(0, i, r);
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
      if (impl == "torch-compile")
        std::cerr << " (compiled per " << (s.compile_scope == "model" ? "model" : "block")
                  << ", context dynamic; compilation in warm-up)";
      std::cerr << " ...\n" << std::flush;
      run_torch_baselines(
          todo, impl,
          [&](size_t t, const E2EResult& r) {
            const size_t i = where[t];
            progress(i, impl);
            std::cerr << " " << outcome(r);
            if (extra_number(r, "compile_s") > 0.05)
              std::cerr << " (compiled in warm-up: " << fmt(extra_number(r, "compile_s"), 1) << " s)";
            std::cerr << "\n";
            finish(k, i, r);
          },
          s.compile_scope);
      lap(impl);
    }
    if (!timing.empty()) std::cerr << size << " done: " << timing << "\n";
  }
  write_text(s.out_dir + "/e2e.md", sweep_markdown(s, st));
  return s.baselines.empty() ? detail_table(st).render() : compare_table(st).render();
}

std::string run_warmup_study(const E2EConfig& c0, const std::string& out_dir) {
  MarkdownTable table({"warm-up steps", "mean ms", "std ms", "first timed step ms", "max ms", "min ms"});
  std::vector<Json> records;
  for (int w : {0, 1, 2, 5}) {
    E2EConfig c = c0;
    c.warmup = w;
    std::cerr << "warm-up " << w << " ..." << std::flush;
    E2EResult r = run_e2e(c);
    std::cerr << " " << (r.status == "ok" ? fmt(r.total.mean, 2) + " ms" : r.status) << "\n";
    for (auto& j : e2e_records(c, r, "lmscale")) {
      j["bench"] = "e2e_warmup";
      records.push_back(j);
    }
    if (r.status != "ok") {
      table.add_row({std::to_string(w), r.status, "-", "-", "-", "-"});
      continue;
    }
    table.add_row({std::to_string(w), fmt(r.total.mean), fmt(r.total.std), fmt(r.step_ms.at(w)), fmt(r.total.max),
                   fmt(r.total.min)});
  }
  append_jsonl(out_dir + "/e2e_warmup.jsonl", records);
  std::ostringstream md;
  md << "# Warm-up study\n\n- command: `" << run_info().command << "`\n- date: " << run_info().date
     << "\n- commit: " << run_info().commit << "\n- device: " << run_info().gpu << "\n- " << c0.setup.model.name
     << ", context " << c0.setup.context << ", " << dtype_name(c0.setup.precision) << ", " << mode_name(c0.mode)
     << ", " << c0.steps << " timed steps; runs in this order in one process, so warm-up 0 also pays the "
     << "process's one-time costs (CUDA context, cuBLAS handles, allocator growth)\n\n"
     << table.render();
  write_text(out_dir + "/e2e_warmup.md", md.str());
  return table.render();
}

}  // namespace lmscale
