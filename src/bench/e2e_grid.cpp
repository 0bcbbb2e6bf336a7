// The grid of an end-to-end sweep; see e2e_grid.h.
#include "bench/e2e_grid.h"

#include <algorithm>

#include "core/device.h"

namespace lmscale {

int64_t sweep_model_context(const E2ESweep& s) {
  int64_t t = s.model_context;
  if (t <= 0)
    for (auto c : s.contexts) t = std::max(t, c);
  return t;
}

E2EConfig sweep_config(const E2ESweep& s, const ModelConfig& model, int64_t context, c10::ScalarType precision,
                       StepMode mode, AttentionBackend backend) {
  E2EConfig c = s.base;
  c.setup.model = model;
  c.setup.model.context_length = sweep_model_context(s);
  c.setup.model.attention = backend;
  c.setup.context = context;
  c.setup.precision = precision;
  c.mode = mode;
  return c;
}

std::vector<E2EConfig> sweep_configs(const E2ESweep& s) {
  std::vector<E2EConfig> out;
  for (const auto& model : s.models)
    for (auto ctx : s.contexts)
      for (auto prec : s.precisions)
        for (auto mode : s.modes)
          for (auto backend : s.backends) out.push_back(sweep_config(s, model, ctx, prec, mode, backend));
  return out;
}

std::string config_label(const E2EConfig& c) {
  return c.setup.model.name + " ctx " + std::to_string(c.setup.context) + " " + dtype_name(c.setup.precision) + " " +
         mode_name(c.mode) + " " + attention_backend_name(c.setup.model.attention);
}

}  // namespace lmscale
