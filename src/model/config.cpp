// Size table and parameter count; see config.h.
#include "model/config.h"

#include <c10/util/Exception.h>

#include <map>

namespace lmscale {

AttentionBackend parse_attention_backend(const std::string& n) {
  if (n == "naive") return AttentionBackend::Naive;
  if (n == "sdpa") return AttentionBackend::Sdpa;
  if (n == "flash") return AttentionBackend::Flash;
  TORCH_CHECK(false, "--attention '", n, "' is not a backend: use naive (plain PyTorch ops), "
              "sdpa (torch scaled_dot_product_attention) or flash (lmscale FlashAttention-2)");
}

std::string attention_backend_name(AttentionBackend b) {
  switch (b) {
    case AttentionBackend::Naive: return "naive";
    case AttentionBackend::Sdpa: return "sdpa";
    case AttentionBackend::Flash: return "flash";
  }
  return "?";
}

int64_t ModelConfig::param_count() const {
  const int64_t d = d_model;
  return 2 * vocab_size * d + num_layers * (4 * d * d + 3 * d * d_ff + 2 * d) + d;
}

void ModelConfig::validate() const {
  TORCH_CHECK(vocab_size > 0 && d_model > 0 && d_ff > 0 && num_layers > 0 && num_heads > 0,
              "model hyperparameters must be positive (vocab ", vocab_size, ", d_model ", d_model, ", d_ff ",
              d_ff, ", layers ", num_layers, ", heads ", num_heads, ")");
  TORCH_CHECK(d_model % num_heads == 0, "d_model ", d_model, " is not divisible by num_heads ", num_heads,
              ": pick heads so that d_model / heads is an integer head dim");
  TORCH_CHECK(d_head() % 2 == 0, "head dim ", d_head(), " is odd: RoPE rotates pairs, so d_model / heads must be even");
  TORCH_CHECK(context_length > 0, "context length must be positive, got ", context_length);
}

ModelConfig model_config(const std::string& size) {
  // name → d_model, d_ff, layers, heads (docs/spec.md §1). `tiny` keeps CPU tests fast.
  struct Row { int64_t d, ff, L, H; };
  static const std::map<std::string, Row> table = {
      {"tiny", {64, 256, 2, 4}},       {"small", {768, 3072, 12, 12}}, {"medium", {1024, 4096, 24, 16}},
      {"large", {1280, 5120, 36, 20}}, {"xl", {1600, 6400, 48, 25}},   {"2.7B", {2560, 10240, 32, 32}}};
  auto it = table.find(size);
  TORCH_CHECK(it != table.end(), "unknown model size '", size,
              "': use one of tiny, small, medium, large, xl, 2.7B (or --size custom with --d-model, "
              "--d-ff, --layers, --heads)");
  ModelConfig c;
  c.name = size;
  c.d_model = it->second.d;
  c.d_ff = it->second.ff;
  c.num_layers = it->second.L;
  c.num_heads = it->second.H;
  if (size == "tiny") c.vocab_size = 512;
  return c;
}

std::vector<std::string> size_names() { return {"small", "medium", "large", "xl", "2.7B"}; }

}  // namespace lmscale
