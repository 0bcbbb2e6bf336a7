// The data order of a training run; see data_order.h.
#include "train_app/data_order.h"

#include <ATen/ATen.h>

namespace lmscale {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

namespace {
void check_length(int64_t n_tokens, int64_t context, const char* what) {
  TORCH_CHECK(n_tokens >= context + 1, "the ", what, " token file has ", n_tokens, " tokens, fewer than context + 1 = ",
              context + 1, " (one window and its targets): use a shorter --context or a larger corpus");
}
}  // namespace

std::vector<int64_t> train_window_starts(uint64_t seed, int64_t step, int64_t batch, int64_t n_tokens,
                                         int64_t context) {
  check_length(n_tokens, context, "training");
  TORCH_CHECK(step >= 0 && batch > 0, "train_window_starts: need step >= 0 and batch > 0");
  const uint64_t choices = static_cast<uint64_t>(n_tokens - context);  // starts 0 .. n - T - 1
  std::vector<int64_t> starts(batch);
  for (int64_t row = 0; row < batch; ++row) {
    // Three chained mixes: seed, step and row each change every bit of the result. The modulo's bias
    // is below choices / 2^64, nothing at corpus sizes.
    const uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(step)) ^ static_cast<uint64_t>(row));
    starts[row] = static_cast<int64_t>(h % choices);
  }
  return starts;
}

std::vector<int64_t> validation_window_starts(int64_t count, int64_t n_tokens, int64_t context) {
  check_length(n_tokens, context, "validation");
  TORCH_CHECK(count > 0, "validation_window_starts: count must be positive, got ", count);
  const int64_t last = n_tokens - context - 1;  // the last start whose targets fit
  std::vector<int64_t> starts(count);
  for (int64_t i = 0; i < count; ++i) starts[i] = count == 1 ? 0 : i * last / (count - 1);
  return starts;
}

Batch batch_of(const TokenFile& file, const std::vector<int64_t>& starts, int64_t context, c10::Device device) {
  const int64_t B = static_cast<int64_t>(starts.size());
  at::Tensor window = at::empty({B, context + 1}, at::kLong);  // (B, T + 1) on the host
  int64_t* w = window.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    TORCH_INTERNAL_ASSERT(starts[b] >= 0 && starts[b] + context + 1 <= file.size(), "window ", starts[b],
                          " runs past the end of ", file.path());
    for (int64_t t = 0; t <= context; ++t) w[b * (context + 1) + t] = file[starts[b] + t];
  }
  window = window.to(device);
  using at::indexing::Slice;
  return {window.index({Slice(), Slice(0, context)}).contiguous(), window.index({Slice(), Slice(1, context + 1)}).contiguous()};
}

}  // namespace lmscale
