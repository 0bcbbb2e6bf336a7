// Delayed FP8 scaling's state to and from a checkpoint; see fp8_checkpoint.h.
#include "train_app/fp8_checkpoint.h"

#include <ATen/ATen.h>

#include <vector>

namespace lmscale {
namespace {

// The Linears that own a row of fp8_histories (a history for their X or their dY).
std::vector<LinearImpl*> linears_with_histories(TransformerLM& model) {
  std::vector<LinearImpl*> out;
  for (auto& m : model->modules(/*include_self=*/false))
    if (auto* lin = m->as<LinearImpl>())
      if (lin->fp8_history_x.defined() || lin->fp8_history_dy.defined()) out.push_back(lin);
  return out;
}

at::Tensor flag(bool on) { return at::full({}, on ? 1 : 0, at::kInt); }

std::string weight_name(size_t k, const char* field) { return "fp8.weight." + std::to_string(k) + "." + field; }

const at::Tensor& saved_tensor(const SafetensorsContents& saved, const std::string& name, const std::string& file) {
  const auto it = saved.tensors.find(name);
  TORCH_CHECK(it != saved.tensors.end(), "the checkpoint's ", file, " has no tensor ", name, ": it was written by "
              "a run with other FP8 settings (--precision, --fp8-scaling, --fp8-min-dim or the fused kernels "
              "differ). Resume with the settings of the run that wrote it, or start without --resume.");
  return it->second;
}

// dst = saved[name] in place, with dst's shape and dtype required.
void copy_into(const at::Tensor& dst, const SafetensorsContents& saved, const std::string& name, const std::string& file) {
  const at::Tensor& src = saved_tensor(saved, name, file);
  TORCH_CHECK(src.sizes() == dst.sizes() && src.scalar_type() == dst.scalar_type(), "the checkpoint's ", name, " in ",
              file, " is ", src.scalar_type(), " ", src.sizes(), ", this run's is ", dst.scalar_type(), " ", dst.sizes(),
              ": another model or other FP8 settings. Resume with the settings of the run that wrote it.");
  dst.copy_(src);
}

bool saved_flag(const SafetensorsContents& saved, const std::string& name, const std::string& file) {
  return saved_tensor(saved, name, file).item<int64_t>() != 0;
}

}  // namespace

bool has_fp8_state(TransformerLM& model) {
  return model->fp8_histories.defined() || !model->fp8_cached_weights.empty();
}

NamedTensors fp8_state_tensors(TransformerLM& model) {
  NamedTensors out;
  if (model->fp8_histories.defined()) {
    const auto lins = linears_with_histories(model);
    out.emplace_back("fp8.histories", model->fp8_histories);
    out.emplace_back("fp8.histories.seeded", flag(!lins.empty() && lins.front()->fp8_history_seeded));
  }
  if (model->fp8_cached_weights.empty()) return out;
  out.emplace_back("fp8.weight_histories", model->fp8_weight_histories);
  for (size_t k = 0; k < model->fp8_cached_weights.size(); ++k) {
    const auto& w = model->fp8_cached_weights[k];
    out.emplace_back(weight_name(k, "data"), w.holder->weight_fp8.data);
    out.emplace_back(weight_name(k, "inv_scale"), w.holder->weight_fp8.inv_scale);
    out.emplace_back(weight_name(k, "seeded"), flag(*w.seeded));
  }
  return out;
}

void load_fp8_state(const SafetensorsContents& saved, TransformerLM& model, const std::string& file) {
  at::NoGradGuard no_grad;
  if (model->fp8_histories.defined()) {
    copy_into(model->fp8_histories, saved, "fp8.histories", file);
    const bool seeded = saved_flag(saved, "fp8.histories.seeded", file);
    // roll_fp8_histories marks every Linear with a history seeded at once; the same here.
    for (auto* lin : linears_with_histories(model)) lin->fp8_history_seeded = seeded;
  }
  if (model->fp8_cached_weights.empty()) return;
  copy_into(model->fp8_weight_histories, saved, "fp8.weight_histories", file);
  for (size_t k = 0; k < model->fp8_cached_weights.size(); ++k) {
    auto& w = model->fp8_cached_weights[k];
    ops::Fp8Tensor& fp8 = w.holder->weight_fp8;
    copy_into(fp8.data, saved, weight_name(k, "data"), file);
    copy_into(fp8.inv_scale, saved, weight_name(k, "inv_scale"), file);
    // The transposed layout the backward GEMM reads is the same bytes transposed (fp8_weight_finish
    // writes it so); rebuilt here rather than saved twice.
    if (fp8.data_t.defined()) fp8.data_t.copy_(fp8.data.t());
    *w.seeded = saved_flag(saved, weight_name(k, "seeded"), file);
  }
}

}  // namespace lmscale
