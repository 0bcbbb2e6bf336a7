// The PyTorch baseline process and its protocol; see e2e_torch_baseline.h.
#include "bench/e2e_torch_baseline.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>

#include "core/device.h"
#include "core/fault_injection.h"
#include "core/interrupt.h"
#include "core/python_module.h"
#include "results/writer.h"

namespace lmscale {
namespace {

constexpr char kModule[] = "lmscale.baseline.e2e";

// One line of the module's input: the config in its terms, plus its index.
Json config_line(const E2EConfig& c, size_t id) {
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

// A temporary file holding the configs, one JSON line each; removed with the object, or by the
// SIGTERM/SIGINT handler when the run is stopped while the baseline runs (core/interrupt.h).
struct ConfigFile {
  std::string path;
  std::unique_ptr<TempFileGuard> guard;
  explicit ConfigFile(const std::vector<E2EConfig>& configs) {
    path = (std::filesystem::temp_directory_path() / "lmscale-baseline-XXXXXX").string();
    const int fd = mkstemp(path.data());
    TORCH_CHECK(fd >= 0, "cannot create a temporary file for the baseline configs in ",
                std::filesystem::temp_directory_path().string(), ": set TMPDIR to a writable folder");
    ::close(fd);  // mkstemp only reserved the name
    guard = std::make_unique<TempFileGuard>(path);
    std::string text;
    for (size_t i = 0; i < configs.size(); ++i) text += config_line(configs[i], i).dump() + "\n";
    write_text(path, text);
  }
  ~ConfigFile() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

}  // namespace

const std::vector<std::string>& torch_baseline_impls() {
  static const std::vector<std::string> impls = {"torch-eager", "torch-compile", "torch-compile-ro", "torch-float8",
                                                 "torch-float8-ro"};
  return impls;
}

void check_torch_baseline(const std::string& impl) {
  const auto& all = torch_baseline_impls();
  TORCH_CHECK(std::find(all.begin(), all.end(), impl) != all.end(), "--compare '", impl,
              "' is not a baseline: use torch-eager, torch-compile, torch-compile-ro, torch-float8 and/or "
              "torch-float8-ro");
}

void check_baseline_scope(const std::string& scope) {
  TORCH_CHECK(scope == "model" || scope == "naive", "--baseline-scope '", scope,
              "' is not a scope: use model (SDPA, the whole model compiled; the default) or naive (attention "
              "written out, each block compiled)");
}

bool torch_baseline_compiles(const std::string& impl) { return impl != "torch-eager"; }

std::string torch_baseline_description(const std::string& impl, const std::string& scope) {
  const bool model = scope == "model";
  const std::string attention =
      model ? "`F.scaled_dot_product_attention` (PyTorch picks flash / cuDNN / memory-efficient)"
            : "attention as lmscale's backend of the row (naive: softmax(QKᵀ)V written out; sdpa and flash: SDPA)";
  if (impl == "torch-eager") return "the model op by op, " + attention + "\n";
  const bool ro = impl.size() > 3 && impl.compare(impl.size() - 3, 3, "-ro") == 0;
  const std::string mode = ro ? "`mode=\"reduce-overhead\"` (CUDA graphs)" : "default mode";
  if (impl.rfind("torch-float8", 0) == 0)
    return "torchao 0.18.0 float8 training (tensorwise: dynamic per-tensor scales, e4m3 forward, e5m2 gradients; "
           "lmscale's FP8 layers, the LM head in bf16) + `torch.compile` of the whole model + loss, " + mode + ", " +
           attention + "; compilation in warm-up, never timed\n";
  if (model)
    return "`torch.compile` of the whole model + loss, " + mode + ", " + attention +
           ", static shapes (one graph per context and grad mode); compilation and graph recording happen in "
           "warm-up, never in a timed step\n";
  return "`torch.compile` of each block and of the head + loss (regional: the blocks share one graph), " + mode +
         ", " + attention + ", the context dimension dynamic; compilation happens in warm-up, never in a timed step\n";
}

std::vector<E2EResult> run_torch_baselines(const std::vector<E2EConfig>& configs, const std::string& impl,
                                           const std::string& scope,
                                           const std::function<void(size_t, const E2EResult&)>& on_result) {
  check_torch_baseline(impl);
  check_baseline_scope(scope);
  std::vector<E2EResult> out(configs.size());
  std::vector<bool> answered(configs.size(), false);
  if (configs.empty()) return out;
  const ConfigFile input(configs);
  auto on_answer = [&](const std::string& line) {
    const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!(j.is_object() && j.contains("id") && j["id"].is_number_unsigned() && j.contains("records") &&
          j["records"].is_array() && j["id"].get<size_t>() < configs.size()))
      return false;
    const size_t i = j["id"].get<size_t>();
    E2EResult r;
    for (const auto& record : j["records"]) add_e2e_record(record, r);
    r.params = configs[i].setup.model.param_count();
    // The module reads LMSCALE_INJECT_OOM too: its oom is then one made on purpose, and said so.
    if (r.status == Status::oom &&
        fault_injected(InjectedFault::oom, configs[i].setup.model.name, configs[i].setup.context))
      r.injected = to_string(InjectedFault::oom);
    out[i] = r;
    answered[i] = true;
    if (on_result) on_result(i, out[i]);
    return true;
  };
  const ModuleRun run = run_json_lines_module(kModule, {"--impl", impl, "--baseline-scope", scope, "--configs", "-"},
                                              input.path, "    [" + impl + "] ", on_answer);
  const ProcessResult& proc = run.proc;
  const std::string& why = run.tail;
  const std::string who = "the " + impl + " baseline (" + python_interpreter() + " -m " + kModule + ")";
  if (!proc.ok() && std::all_of(answered.begin(), answered.end(), [](bool a) { return a; }))
    std::cerr << "    [" << impl << "] note: " << who << " " << proc.describe() << " after answering every config\n";
  for (size_t i = 0; i < configs.size(); ++i) {
    if (answered[i]) continue;
    out[i].status = Status::error;
    out[i].params = configs[i].setup.model.param_count();
    out[i].reason = who + (proc.started ? " " + proc.describe() + " without a result for this config"
                                        : ": " + proc.describe()) +
                    (why.empty() ? "" : ": " + why) + "; if that interpreter lacks torch, " + python_fix();
    if (on_result) on_result(i, out[i]);
  }
  return out;
}

}  // namespace lmscale
