// Generation; see sampling.h.
#include "train_app/sampling.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include <algorithm>

namespace lmscale {

int64_t next_token(const at::Tensor& logits, double temperature, double top_p, at::Generator& gen) {
  TORCH_CHECK(temperature >= 0, "--temperature must be >= 0 (0: greedy), got ", temperature);
  TORCH_CHECK(top_p > 0 && top_p <= 1, "--top-p must be in (0, 1], got ", top_p);
  const at::Tensor l = logits.detach().to(at::kCPU, at::kDouble).reshape({-1});
  if (temperature == 0) return l.argmax().item<int64_t>();
  const at::Tensor probs = at::softmax(l / temperature, 0);
  const auto [sorted, order] = probs.sort(/*dim=*/0, /*descending=*/true);
  // Keep a token while the probability of the more likely ones before it is still below p: the
  // first is always kept, and the set stops once it reaches p.
  const at::Tensor before = sorted.cumsum(0) - sorted;
  const at::Tensor kept = sorted * (before < top_p).to(at::kDouble);
  const int64_t pick = at::multinomial(kept / kept.sum(), 1, /*replacement=*/false, gen).item<int64_t>();
  return order[pick].item<int64_t>();
}

std::vector<int64_t> generate(TransformerLM& model, const std::vector<int64_t>& prompt, const SampleOptions& o,
                              c10::Device device) {
  TORCH_CHECK(!prompt.empty(), "the prompt has no tokens: pass a --prompt with some text");
  TORCH_CHECK(o.window >= 1, "the sampling window must be at least 1 token");
  at::NoGradGuard no_grad;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  std::vector<int64_t> ids = prompt, out;
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    const int64_t start = std::max<int64_t>(0, static_cast<int64_t>(ids.size()) - o.window);
    const std::vector<int64_t> window(ids.begin() + start, ids.end());
    const at::Tensor input = at::tensor(window, at::kLong).reshape({1, -1}).to(device);
    const at::Tensor logits = model->forward(input);  // (1, T, V)
    const int64_t id = next_token(logits[0][-1], o.temperature, o.top_p, gen);
    if (o.stop_id && id == *o.stop_id) break;
    ids.push_back(id);
    out.push_back(id);
  }
  return out;
}

}  // namespace lmscale
