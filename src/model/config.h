// Model hyperparameters as a plain struct, the named size table of docs/spec.md §1 (small … 2.7B plus
// `tiny` for CPU tests), and the closed-form parameter count (no allocation, so 2.7B is cheap).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lmscale {

enum class AttentionBackend { Naive, Sdpa, Flash };
AttentionBackend parse_attention_backend(const std::string& name);  // naive | sdpa | flash
std::string attention_backend_name(AttentionBackend b);

struct ModelConfig {
  std::string name = "custom";
  int64_t vocab_size = 10000;
  int64_t context_length = 1024;  // longest sequence the RoPE table covers
  int64_t d_model = 768;
  int64_t d_ff = 3072;
  int64_t num_layers = 12;
  int64_t num_heads = 12;
  double rope_theta = 10000.0;
  AttentionBackend attention = AttentionBackend::Naive;

  int64_t d_head() const { return d_model / num_heads; }
  // 2·V·d (embedding + untied head) + L·(4d² + 3·d·d_ff + 2d) + d (final norm).
  int64_t param_count() const;
  // Throws naming the bad field when the config cannot build a model (e.g. d_model % heads != 0).
  void validate() const;
};

// small | medium | large | xl | 2.7B | tiny. Throws listing the known names otherwise.
ModelConfig model_config(const std::string& size);
std::vector<std::string> size_names();  // the five sizes of docs/spec.md §1, smallest first

}  // namespace lmscale
