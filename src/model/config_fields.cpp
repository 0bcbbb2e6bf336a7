// The model's shape as record fields (config_fields.h).
#include "model/config_fields.h"

namespace lmscale {

Json model_fields(const ModelConfig& m) {
  return Json{{field::size, m.name},          {field::d_model, m.d_model}, {field::d_ff, m.d_ff},
              {field::layers, m.num_layers},  {field::heads, m.num_heads}, {field::vocab, m.vocab_size},
              {field::params, m.param_count()}};
}

}  // namespace lmscale
