// Checkpoints of `lmscale train`; see checkpoint.h.
#include "train_app/checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <fcntl.h>
#include <ftw.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>
#include <torch/nn/module.h>

#include "core/sha256.h"
#include "train_app/fp8_checkpoint.h"
#include "train_app/safetensors.h"

namespace lmscale {

namespace fs = std::filesystem;

namespace {

constexpr char kFormat[] = "lmscale-checkpoint";
constexpr int kVersion = 1;
constexpr char kManifest[] = "manifest.json";

std::string step_folder_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

// A folder and everything in it, gone (a missing one is no error). Not std::filesystem's remove_all: libtorch.so
// exports its own copy of that symbol, which the dynamic linker binds our call to, and that copy crashed (a call
// through a null pointer) the first time a run removed an old checkpoint (tests/cpp/support/temp_dirs.h says the same).
void remove_tree(const fs::path& folder) {
  auto remove_one = [](const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); };
  ::nftw(folder.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

// fsync of a file or folder, so that a rename after it publishes only bytes already on the disk.
void sync_path(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  TORCH_CHECK(fd >= 0, "cannot open ", p.string(), " to sync it: ", std::strerror(errno));
  const bool ok = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  TORCH_CHECK(ok, "fsync of ", p.string(), " failed: ", std::strerror(err));
}

void write_synced(const fs::path& p, const std::string& text) {
  {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f << text;
    f.flush();
    TORCH_CHECK(f, "writing ", p.string(), " failed (disk full?)");
  }
  sync_path(p);
}

// The model's parameters in the reference's names, in lmscale's order.
NamedTensors reference_params(TransformerLM& model) {
  NamedTensors out;
  for (const auto& item : model->named_parameters(/*recurse=*/true)) out.emplace_back(reference_name(item.key()), item.value());
  return out;
}

at::Tensor rng_state(c10::Device device) {
  at::Generator gen = device.is_cpu() ? at::detail::getDefaultCPUGenerator() : at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_rng_state(c10::Device device, const at::Tensor& state) {
  at::Generator gen = device.is_cpu() ? at::detail::getDefaultCPUGenerator() : at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

Json read_manifest(const fs::path& folder, std::string* problem) {
  std::ifstream f(folder / kManifest);
  if (!f) {
    *problem = "it has no manifest.json (a write that never finished)";
    return Json();
  }
  Json m = Json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object() || m.value("format", "") != kFormat || !m.contains("files") || !m["files"].is_object() ||
      !m.contains("step") || !m["step"].is_number_integer()) {
    *problem = "its manifest.json is not an lmscale checkpoint manifest (damaged?)";
    return Json();
  }
  if (m.value("version", 0) != kVersion) {
    *problem = "its manifest.json has version " + m.value("version", Json()).dump() + "; this lmscale reads " +
               std::to_string(kVersion);
    return Json();
  }
  return m;
}

// The step-N folders of `dir`, newest first.
std::vector<std::pair<int64_t, fs::path>> step_folders(const fs::path& dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  static const std::regex pattern("^step-([0-9]{8,})$");
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (e.is_directory() && std::regex_match(name, m, pattern)) out.emplace_back(std::stoll(m[1]), e.path());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

const at::Tensor& need(const SafetensorsContents& c, const std::string& name, const std::string& file) {
  const auto it = c.tensors.find(name);
  TORCH_CHECK(it != c.tensors.end(), "the checkpoint's ", file, " has no tensor ", name,
              ": it was written for another model (pass the checkpoint of this run, or start without --resume)");
  return it->second;
}

// Copies saved weights into the model's parameters in place (their storage, packed q/k/v included,
// stays where the optimizer and CUDA graphs expect it).
void copy_weights(const SafetensorsContents& saved, TransformerLM& model, const std::string& file) {
  at::NoGradGuard no_grad;
  for (auto& [name, param] : reference_params(model)) {
    const at::Tensor& t = need(saved, name, file);
    TORCH_CHECK(t.sizes() == param.sizes(), "the checkpoint's ", name, " has shape ", t.sizes(), ", the model's is ",
                param.sizes(), ": another model size (check --size and the shape flags)");
    param.copy_(t);
  }
}

}  // namespace

std::string reference_name(const std::string& lmscale_name) {
  // The same patterns, in the same order, as python/lmscale/baseline/train.py's RENAMES.
  static const std::vector<std::pair<std::regex, std::string>> renames = {
      {std::regex(R"(^token_embeddings\.weight$)"), "emb"}, {std::regex(R"(^layers\.)"), "blocks."},
      {std::regex(R"(\.attn\.(q|k|v)_proj\.)"), ".attn.$1."}, {std::regex(R"(\.attn\.output_proj\.)"), ".attn.o."},
      {std::regex(R"(\.ffn\.)"), "."}, {std::regex(R"(^ln_final\.)"), "ln."}, {std::regex(R"(^lm_head\.)"), "head."}};
  std::string name = lmscale_name;
  for (const auto& [pattern, repl] : renames) name = std::regex_replace(name, pattern, repl);
  return name;
}

std::string save_checkpoint(const CheckpointOptions& o, TrainingStep& step, const TrainerState& state) {
  const fs::path dir(o.dir);
  fs::create_directories(dir);
  const std::string name = step_folder_name(state.step);
  const fs::path tmp = dir / (".tmp-" + name + "-" + std::to_string(::getpid()));
  remove_tree(tmp);
  fs::create_directory(tmp);
  const c10::Device device = step.setup().device;
  FusedAdamW& opt = step.optimizer();
  Json files = Json::object();
  auto record = [&](const std::string& file, int64_t bytes) {
    files[file] = {{"bytes", bytes}, {"sha256", sha256_file((tmp / file).string())}};
  };

  const NamedTensors params = reference_params(step.model());
  record("model.safetensors", write_safetensors((tmp / "model.safetensors").string(), params,
                                                {{"format", "pt"}, {"names", "python/lmscale/baseline/e2e.py LM"}}));
  NamedTensors moments;
  for (size_t i = 0; i < params.size() && i < opt.exp_avg().size(); ++i) {
    moments.emplace_back("exp_avg." + params[i].first, opt.exp_avg()[i]);
    moments.emplace_back("exp_avg_sq." + params[i].first, opt.exp_avg_sq()[i]);
  }
  const int64_t adamw_steps = opt.step_count();
  moments.emplace_back("step", at::full({}, static_cast<double>(adamw_steps), at::kFloat));
  record("optimizer.safetensors", write_safetensors((tmp / "optimizer.safetensors").string(), moments));
  NamedTensors trainer{{"rng.cpu", rng_state(c10::Device("cpu"))},
                       {"loss_sum", state.loss_sum.defined() ? state.loss_sum.to(at::kFloat) : at::zeros({}, at::kFloat)}};
  if (device.is_cuda()) trainer.emplace_back("rng.device", rng_state(device));
  record("trainer.safetensors", write_safetensors((tmp / "trainer.safetensors").string(), trainer));
  // Delayed FP8 scaling's histories and cached FP8 weights: without them a resumed run would start every
  // scale afresh and part from the uninterrupted run (fp8_checkpoint.h).
  const NamedTensors fp8 = fp8_state_tensors(step.model());
  if (!fp8.empty()) record("fp8.safetensors", write_safetensors((tmp / "fp8.safetensors").string(), fp8));
  if (!o.tokenizer_path.empty()) {
    fs::copy_file(o.tokenizer_path, tmp / "tokenizer.json", fs::copy_options::overwrite_existing);
    sync_path(tmp / "tokenizer.json");
    record("tokenizer.json", static_cast<int64_t>(fs::file_size(tmp / "tokenizer.json")));
  }

  const ModelConfig& m = step.setup().model;
  const AdamWOptions& a = step.setup().adamw;
  Json manifest = {
      {"format", kFormat},
      {"version", kVersion},
      {"step", state.step},
      {"config", o.config},
      {"model", {{"size", m.name}, {"vocab_size", m.vocab_size}, {"context_length", m.context_length},
                 {"d_model", m.d_model}, {"d_ff", m.d_ff}, {"num_layers", m.num_layers}, {"num_heads", m.num_heads},
                 {"rope_theta", m.rope_theta}, {"attention", attention_backend_name(m.attention)},
                 {"tensor_names", "the PyTorch reference's: python/lmscale/baseline/e2e.py LM.state_dict()"}}},
      {"optimizer", {{"name", "AdamW"}, {"step", adamw_steps}, {"beta1", a.beta1}, {"beta2", a.beta2},
                     {"eps", a.eps}, {"weight_decay", a.weight_decay},
                     {"tensors", "exp_avg.<name>, exp_avg_sq.<name> per parameter, step"}}},
      {"trainer", {{"losses_since_eval", state.losses},
                   {"data", "the windows of step s are a pure function of (seed, s): data_order.h; the next step is " +
                                std::to_string(state.step + 1)}}},
      {"corpus", o.corpus},
      {"commit", run_info().commit},
      {"date", run_info().date},
      {"files", files}};
  if (!fp8.empty())
    manifest["fp8"] = {{"scaling", "delayed"},
                       {"tensors", "fp8.safetensors: fp8.histories (+ .seeded), fp8.weight_histories, "
                                   "fp8.weight.<k>.data / .inv_scale / .seeded per cached FP8 weight"}};
  write_synced(tmp / kManifest, manifest.dump(1) + "\n");
  sync_path(tmp);

  const fs::path final_path = dir / name;
  std::error_code ec;
  const fs::path old = dir / (".old-" + name + "-" + std::to_string(::getpid()));
  if (fs::exists(final_path, ec)) fs::rename(final_path, old);  // a save of the same step again replaces it
  fs::rename(tmp, final_path);
  sync_path(dir);
  remove_tree(old);
  // This run's older checkpoints beyond `keep` (another run's in the same folder, and damaged ones,
  // are left alone), and folders left by writes that crashed (never ours: pid-named).
  int kept = 0;
  for (const auto& [s, folder] : step_folders(dir)) {
    std::string problem;
    const Json m = read_manifest(folder, &problem);
    if (!problem.empty() || m.value("config", Json()) != o.config) continue;
    if (++kept > std::max(o.keep, 1)) remove_tree(folder);
  }
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(".tmp-", 0) == 0 || n.rfind(".old-", 0) == 0) remove_tree(e.path());
  }
  return final_path.string();
}

std::string checkpoint_problem(const std::string& path) {
  std::string problem;
  const Json m = read_manifest(path, &problem);
  if (!problem.empty()) return problem;
  for (const auto& [file, e] : m["files"].items()) {
    const fs::path p = fs::path(path) / file;
    std::error_code ec;
    const auto size = fs::file_size(p, ec);
    if (ec) return file + " is missing";
    if (!e.contains("bytes") || static_cast<int64_t>(size) != e["bytes"].get<int64_t>())
      return file + " has " + std::to_string(size) + " bytes, the manifest says " + e.value("bytes", Json()).dump();
    if (sha256_file(p.string()) != e.value("sha256", ""))
      return file + "'s SHA-256 differs from the manifest's (the file changed after it was written)";
  }
  return "";
}

std::optional<CheckpointInfo> find_checkpoint(const std::string& dir, const Json& config, std::ostream& log) {
  for (const auto& [s, path] : step_folders(dir)) {
    const std::string problem = checkpoint_problem(path.string());
    if (!problem.empty()) {
      log << "checkpoint " << path.string() << " is damaged, skipped: " << problem << "\n";
      continue;
    }
    std::string unused;
    Json m = read_manifest(path, &unused);
    if (!config.is_null() && m.value("config", Json()) != config) {
      std::string differs;
      for (const auto& [k, v] : config.items())
        if (!m["config"].contains(k) || m["config"][k] != v) differs += (differs.empty() ? "" : ", ") + k;
      log << "checkpoint " << path.string() << " is of another run (" << (differs.empty() ? "fields" : differs)
          << " differ), skipped\n";
      continue;
    }
    return CheckpointInfo{path.string(), m["step"].get<int64_t>(), std::move(m)};
  }
  return std::nullopt;
}

CheckpointInfo open_checkpoint(const std::string& path) {
  std::error_code ec;
  TORCH_CHECK(fs::is_directory(path, ec), "--checkpoint ", path, ": no such folder; pass a checkpoint folder that "
              "`lmscale train` wrote (<out>/checkpoints/<run>/step-N) or the run's folder of them");
  if (fs::exists(fs::path(path) / kManifest)) {
    const std::string problem = checkpoint_problem(path);
    TORCH_CHECK(problem.empty(), "--checkpoint ", path, " is damaged: ", problem,
                ". Pass another step's folder beside it, or train again (lmscale train --resume writes a new one)");
    std::string unused;
    Json m = read_manifest(path, &unused);
    return CheckpointInfo{path, m["step"].get<int64_t>(), std::move(m)};
  }
  std::ostringstream skipped;
  auto found = find_checkpoint(path, Json(), skipped);
  TORCH_CHECK(found, "--checkpoint ", path, " holds no whole checkpoint (step-N folder with a manifest.json)",
              skipped.str().empty() ? std::string() : ": " + skipped.str(),
              "; pass a checkpoint folder that `lmscale train` wrote (<out>/checkpoints/<run>/step-N)");
  return *found;
}

TrainerState load_checkpoint(const CheckpointInfo& c, TrainingStep& step) {
  const fs::path dir(c.path);
  copy_weights(read_safetensors((dir / "model.safetensors").string()), step.model(), "model.safetensors");
  step.resync_weight_copies();  // the weights moved under the bf16 copies the GEMMs read
  if (has_fp8_state(step.model())) {  // after the resync, which set the FP8 weights and histories up afresh
    TORCH_CHECK(c.manifest.at("files").contains("fp8.safetensors"), "checkpoint ", c.path, " holds no FP8 "
                "delayed-scaling state (fp8.safetensors: the amax histories and the cached FP8 weights), which this "
                "run (--precision fp8, delayed scaling) needs to continue as the uninterrupted run would; it was "
                "written by an lmscale that did not save that state. Train from the start without --resume (resuming "
                "would restart every scale and part from the uninterrupted run).");
    load_fp8_state(read_safetensors((dir / "fp8.safetensors").string()), step.model(), "fp8.safetensors");
  }
  const SafetensorsContents opt = read_safetensors((dir / "optimizer.safetensors").string());
  const int64_t steps = static_cast<int64_t>(need(opt, "step", "optimizer.safetensors").item<float>());
  if (steps > 0) {
    std::vector<at::Tensor> m, v;
    for (const auto& [name, param] : reference_params(step.model())) {
      m.push_back(need(opt, "exp_avg." + name, "optimizer.safetensors"));
      v.push_back(need(opt, "exp_avg_sq." + name, "optimizer.safetensors"));
    }
    step.optimizer().load_state(m, v, steps);
  }
  const SafetensorsContents trainer = read_safetensors((dir / "trainer.safetensors").string());
  set_rng_state(c10::Device("cpu"), need(trainer, "rng.cpu", "trainer.safetensors"));
  const c10::Device device = step.setup().device;
  if (device.is_cuda() && trainer.tensors.count("rng.device")) set_rng_state(device, trainer.tensors.at("rng.device"));
  TrainerState s;
  s.step = c.step;
  s.loss_sum = need(trainer, "loss_sum", "trainer.safetensors").to(device);
  s.losses = c.manifest.at("trainer").value("losses_since_eval", int64_t{0});
  return s;
}

ModelConfig checkpoint_model_config(const CheckpointInfo& c) {
  const Json& j = c.manifest.at("model");
  ModelConfig m;
  m.name = j.value("size", "custom");
  m.vocab_size = j.at("vocab_size").get<int64_t>();
  m.context_length = j.at("context_length").get<int64_t>();
  m.d_model = j.at("d_model").get<int64_t>();
  m.d_ff = j.at("d_ff").get<int64_t>();
  m.num_layers = j.at("num_layers").get<int64_t>();
  m.num_heads = j.at("num_heads").get<int64_t>();
  m.rope_theta = j.at("rope_theta").get<double>();
  m.attention = parse_attention_backend(j.value("attention", "naive"));
  return m;
}

void load_checkpoint_weights(const CheckpointInfo& c, TransformerLM& model) {
  copy_weights(read_safetensors((fs::path(c.path) / "model.safetensors").string()), model, "model.safetensors");
}

}  // namespace lmscale
