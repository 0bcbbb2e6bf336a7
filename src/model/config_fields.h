// The model's shape as record fields (size, d_model, d_ff, layers, heads, vocab, params): one place for
// every record that names a model, the benchmark's and the training run's alike (field names:
// results/record.h).
#pragma once
#include "model/config.h"
#include "results/record.h"

namespace lmscale {

Json model_fields(const ModelConfig& m);

}  // namespace lmscale
