// Driving the PyTorch reference trainer; see train_reference.h.
#include "train_app/train_reference.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <limits>

#include "core/interrupt.h"
#include "core/python_module.h"
#include "model/config.h"
#include "results/writer.h"
#include "train_app/data_order.h"
#include "train/initial_weights.h"
#include "train_app/token_file.h"

namespace lmscale {

namespace {
constexpr char kModule[] = "lmscale.baseline.train";

double number_or_nan(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : std::numeric_limits<double>::quiet_NaN();
}
}  // namespace

const std::vector<std::string>& torch_reference_impls() {
  static const std::vector<std::string> impls = {"torch-eager"};
  return impls;
}

bool is_torch_reference(const std::string& impl) {
  const auto& all = torch_reference_impls();
  return std::find(all.begin(), all.end(), impl) != all.end();
}

std::string torch_reference_unsupported(const std::string& precision) {
  if (precision == "fp32" || precision == "bf16" || precision == "fp16") return "";
  return "the PyTorch reference trains in fp32, bf16 or fp16 (autocast), not " + precision;
}

Json torch_reference_input(const TrainRun& run, const std::set<int64_t>& recorded) {
  const auto& s = run.setup;
  const auto& m = s.model;
  // The batches and learning rates are computed here, once, and handed over: the reference never
  // re-implements the data order or the schedule, so the two cannot drift apart.
  const int64_t n_train = TokenFile(run.train_path, m.vocab_size).size();
  const int64_t n_val = TokenFile(run.val_path, m.vocab_size).size();
  Json starts = Json::array(), lrs = Json::array();
  for (int64_t step = 1; step <= run.steps; ++step) {
    starts.push_back(train_window_starts(run.data_seed, step - 1, s.batch, n_train, s.context));
    lrs.push_back(lr_at(run.lr, step));
  }
  const std::vector<int64_t> evals = evaluation_steps(run);
  return Json{{"impl", run.impl},
              {"vocab", m.vocab_size},
              {"d_model", m.d_model},
              {"d_ff", m.d_ff},
              {"layers", m.num_layers},
              {"heads", m.num_heads},
              {"model_context", std::max(m.context_length, s.context)},
              {"context", s.context},
              {"batch", s.batch},
              {"precision", run.precision},
              {"device", s.device.str()},
              {"seed", s.seed},
              {"adamw", {{"lr", run.lr.peak},
                         {"beta1", s.adamw.beta1},
                         {"beta2", s.adamw.beta2},
                         {"eps", s.adamw.eps},
                         {"weight_decay", s.adamw.weight_decay}}},
              {"clip", run.clip},
              {"train_path", run.train_path},
              {"val_path", run.val_path},
              {"train_tokens", n_train},
              {"val_tokens", n_val},
              {"eval_steps", evals},
              {"recorded", std::vector<int64_t>(recorded.begin(), recorded.end())},
              {"eval_batches", run.eval_batches},
              {"val_starts", validation_window_starts(run.eval_batches * s.batch, n_val, s.context)},
              {"lr", lrs},
              {"train_starts", starts},
              // The reference cuts the rows itself (segment_ids), from the same id, by the rule of packing.h.
              {"pack", run.pack},
              {"end_of_file_id", run.end_of_file_id}};
}

void train_torch_reference(const TrainRun& run, const std::set<int64_t>& recorded, const TrainCallbacks& cb) {
  TORCH_CHECK(is_torch_reference(run.impl), "train_torch_reference: '", run.impl, "' is not a PyTorch reference");
  const std::string why = torch_reference_unsupported(run.precision);
  TORCH_CHECK(why.empty(), why);
  validate(run);
  std::string path = (std::filesystem::temp_directory_path() / "lmscale-train-XXXXXX").string();
  const int fd = mkstemp(path.data());
  TORCH_CHECK(fd >= 0, "cannot create a temporary file for the reference run: set TMPDIR to a writable folder");
  ::close(fd);
  const std::string weights = path + ".weights";
  // A SIGTERM/SIGINT removes them too (core/interrupt.h): the weights are the model's, in fp32.
  const TempFileGuard run_guard(path), weights_guard(weights), index_guard(weights + ".json");
  struct Cleanup {  // the run and the weights go, whatever happens
    std::vector<std::string> files;
    ~Cleanup() {
      std::error_code ec;
      for (const auto& f : files) std::filesystem::remove(f, ec);
    }
  } cleanup{{path, weights, weights + ".json"}};
  // lmscale's initial weights for this setup: the reference starts where lmscale starts.
  write_initial_weights(run.setup, weights);
  Json input = torch_reference_input(run, recorded);
  input["init_weights"] = weights;
  write_text(path, input.dump() + "\n");
  struct {
    int64_t step = -1;
    std::string what;
    double value = 0;
  } diverged;
  auto on_answer = [&](const std::string& line) {
    const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("diverged") && j["diverged"].is_object()) {  // Note [divergence]
      const Json& d = j["diverged"];
      diverged.step = d.value("step", int64_t{0});
      diverged.what = d.value("what", std::string("loss"));
      try {
        diverged.value = std::stod(d.value("value", std::string("nan")));
      } catch (const std::exception&) {
        diverged.value = std::numeric_limits<double>::quiet_NaN();
      }
      return true;
    }
    if (j.is_object() && j.contains("eval") && j["eval"].is_object()) {
      const Json& e = j["eval"];
      Evaluation ev;
      ev.step = e.value("step", int64_t{0});
      ev.train_loss = number_or_nan(e, "train_loss");
      ev.val_loss = number_or_nan(e, "val_loss");
      ev.grad_norm = number_or_nan(e, "grad_norm");
      ev.lr = number_or_nan(e, "lr");
      ev.elapsed_s = number_or_nan(e, "elapsed_s");
      if (cb.on_eval) cb.on_eval(ev);
      return true;
    }
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer()) {
      if (cb.on_step) cb.on_step(j["step"].get<int64_t>());
      return true;
    }
    return false;
  };
  const ModuleRun module = run_json_lines_module(kModule, {"--run", path}, "", "    [" + run.impl + "] ", on_answer);
  if (diverged.step >= 0)
    throw TrainingDiverged(diverged.step, divergence_message(run, diverged.step, diverged.what, diverged.value));
  if (module.proc.ok()) return;
  const ProcessResult& proc = module.proc;
  const std::string& last = module.tail;
  TORCH_CHECK(false, "the ", run.impl, " reference (", python_interpreter(), " -m ", kModule, ") ", proc.describe(),
              last.empty() ? "" : ": " + last, "; if that interpreter lacks torch, ", python_fix());
}

}  // namespace lmscale
