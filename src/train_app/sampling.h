// Text generation from a trained model (`lmscale sample`): the next token from the last position's
// logits, greedy at temperature 0, else nucleus (top-p) sampling with a seeded generator, and the loop
// that feeds each token back. No KV cache: each token runs the whole window again, which is enough
// for a smoke test of a checkpoint. Tokenizing the text is sample_tokenizer.h's.
#pragma once
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "model/transformer.h"

namespace lmscale {

struct SampleOptions {
  int64_t max_new_tokens = 64;
  double temperature = 0.8;  // 0: greedy (argmax)
  double top_p = 0.95;       // the smallest set of most likely tokens whose probability reaches p
  uint64_t seed = 0;
  int64_t window = 128;      // the last `window` tokens are the model's input (the trained context)
  std::optional<int64_t> stop_id;  // generation ends at this id (the corpus's end of text), not included
};

// The next token from `logits` (V,) of one position. temperature 0: argmax (the first on ties);
// else softmax(logits / temperature) cut to the top-p nucleus (the most likely token always kept),
// renormalised and drawn with `gen`. Throws for a negative temperature or p outside (0, 1].
int64_t next_token(const at::Tensor& logits, double temperature, double top_p, at::Generator& gen);

// Appends up to max_new_tokens tokens to `prompt` (ids on the host) and returns the new ones only.
std::vector<int64_t> generate(TransformerLM& model, const std::vector<int64_t>& prompt, const SampleOptions& options,
                              c10::Device device);

}  // namespace lmscale
