// End-to-end sweep, warm-up study and PyTorch baselines; see e2e_sweep.h.
#include "bench/e2e_sweep.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <iostream>
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

Summary summary_from(const Json& j) {
  Summary s;
  if (j.is_null()) return s;
  s.mean = j.value("mean", 0.0);
  s.std = j.value("std", 0.0);
  s.median = j.value("median", 0.0);
  s.n = j.value("n", 0);
  return s;
}

std::string cell_ms(const Summary& s) { return s.n ? fmt(s.mean, 2) + " ± " + fmt(s.std, 2) : "-"; }

}  // namespace

E2EResult run_torch_baseline(const E2EConfig& c, const std::string& impl) {
  TORCH_CHECK(impl == "torch-eager" || impl == "torch-compile", "--compare '", impl,
              "' is not a baseline: use torch-eager or torch-compile");
  const auto& m = c.setup.model;
  std::ostringstream cmd;
  cmd << "'" << python_exe() << "' '" << baseline_script() << "'"
      << " --impl " << (impl == "torch-eager" ? "eager" : "compile") << " --vocab " << m.vocab_size << " --d-model "
      << m.d_model << " --d-ff " << m.d_ff << " --layers " << m.num_layers << " --heads " << m.num_heads
      << " --context " << c.setup.context << " --batch " << c.setup.batch << " --precision "
      << dtype_name(c.setup.precision) << " --mode " << mode_name(c.mode) << " --attention "
      << attention_backend_name(m.attention) << " --warmup " << c.warmup << " --steps " << c.steps << " --device "
      << c.setup.device.str() << " 2>&1";
  E2EResult r;
  std::string out;
  if (FILE* p = popen(cmd.str().c_str(), "r")) {
    std::array<char, 4096> buf{};
    while (fgets(buf.data(), buf.size(), p)) out += buf.data();
    pclose(p);
  }
  // The script's last line is its JSON result; anything before it is diagnostics.
  auto pos = out.rfind("\n{");
  std::string last = out.substr(pos == std::string::npos ? 0 : pos + 1);
  Json j;
  try {
    j = Json::parse(last);
  } catch (const std::exception&) {
    r.status = "error";
    r.message = "baseline script failed: " + out.substr(out.size() > 600 ? out.size() - 600 : 0);
    return r;
  }
  r.status = j.value("status", "error");
  r.message = j.value("message", "");
  r.forward = summary_from(j.value("forward_ms", Json()));
  r.backward = summary_from(j.value("backward_ms", Json()));
  r.optimizer = summary_from(j.value("optimizer_ms", Json()));
  r.total = summary_from(j.value("step_ms", Json()));
  r.step_ms = j.value("all_step_ms", std::vector<double>{});
  r.peak_bytes = j.value("peak_memory_bytes", int64_t{0});
  r.params = m.param_count();
  if (r.total.mean > 0) r.tokens_per_s = c.setup.batch * c.setup.context / (r.total.mean / 1e3);
  return r;
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

std::string run_e2e_sweep(const E2ESweep& s) {
  MarkdownTable table({"size", "context", "precision", "mode", "attention", "impl", "forward ms", "backward ms",
                       "optimizer ms", "step ms", "tokens/s", "MFU", "peak memory", "lmscale speedup"});
  const size_t total = s.models.size() * s.contexts.size() * s.precisions.size() * s.modes.size() *
                       s.backends.size() * (1 + s.baselines.size());
  size_t done = 0;
  for (const auto& model0 : s.models)
    for (auto ctx : s.contexts)
      for (auto prec : s.precisions)
        for (auto mode : s.modes)
          for (auto backend : s.backends) {
            const E2EConfig c = sweep_config(s, model0, ctx, prec, mode, backend);
            double lmscale_ms = 0;
            std::vector<std::string> impls = {"lmscale"};
            impls.insert(impls.end(), s.baselines.begin(), s.baselines.end());
            for (const auto& impl : impls) {
              ++done;
              std::cerr << "[" << done << "/" << total << "] " << model0.name << " ctx " << ctx << " "
                        << dtype_name(prec) << " " << mode_name(mode) << " " << attention_backend_name(backend)
                        << " " << impl << " ..." << std::flush;
              E2EResult r = impl == "lmscale" ? run_e2e(c) : run_torch_baseline(c, impl);
              std::cerr << " " << (r.status == "ok" ? fmt(r.total.mean, 2) + " ms" : r.status) << "\n";
              if (r.status == "error") std::cerr << "    " << r.message << "\n";
              // Appended per config, so a sweep cut short (time limit, crash) keeps what it measured.
              append_jsonl(s.out_dir + "/e2e.jsonl", e2e_records(c, r, impl));
              if (impl == "lmscale" && r.status == "ok") lmscale_ms = r.total.mean;
              const bool ok = r.status == "ok";
              std::string speedup = "-";
              if (impl != "lmscale" && ok && lmscale_ms > 0) speedup = fmt(r.total.mean / lmscale_ms, 2) + "×";
              table.add_row({model0.name, std::to_string(ctx), dtype_name(prec), mode_name(mode),
                             attention_backend_name(backend), impl, ok ? cell_ms(r.forward) : "-",
                             ok ? cell_ms(r.backward) : "-", ok ? cell_ms(r.optimizer) : "-",
                             ok ? cell_ms(r.total) : (r.status == "oom" ? "OOM" : "error"),
                             ok ? fmt(r.tokens_per_s, 0) : "-", ok && r.mfu > 0 ? fmt(100 * r.mfu, 1) + "%" : "-",
                             ok && r.peak_bytes ? fmt_bytes(r.peak_bytes) : "-", speedup});
            }
          }
  std::ostringstream md;
  md << "# End-to-end benchmark\n\n"
     << "- command: `" << run_info().command << "`\n- date: " << run_info().date << "\n- commit: " << run_info().commit
     << "\n- device: " << run_info().gpu << "\n- batch " << s.base.setup.batch << ", warm-up " << s.base.warmup
     << ", timed steps " << s.base.steps << (s.base.cuda_graph ? ", whole step replayed as a CUDA graph" : "")
     << "\n- times: mean ± std over timed steps; lmscale speedup = baseline step time / lmscale step time\n\n"
     << table.render();
  write_text(s.out_dir + "/e2e.md", md.str());
  return table.render();
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
