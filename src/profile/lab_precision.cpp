// Mixed-precision lab experiments; see lab_precision.h.
#include "profile/lab_precision.h"

#include <torch/torch.h>

#include "core/autocast.h"
#include "core/device.h"
#include "core/error.h"

namespace lmscale {

std::vector<AccumulationResult> run_accumulation(int64_t steps, double increment) {
  TORCH_CHECK(steps > 0, "accumulation steps must be positive, got ", steps, ": pass --steps N with N >= 1");
  struct Variant {
    const char* id;
    c10::ScalarType acc, inc;
    bool cast_to_acc;  // cast the increment to the accumulator dtype before adding
    double expected;   // CS336 handout values for 1000 × 0.01
  };
  const bool handout = steps == 1000 && increment == 0.01;
  const Variant variants[] = {{"fp32+fp32", c10::kFloat, c10::kFloat, false, 10.0001},
                              {"fp16+fp16", c10::kHalf, c10::kHalf, false, 9.9531},
                              {"fp32+fp16", c10::kFloat, c10::kHalf, false, 10.0021},
                              {"fp32+fp16->fp32", c10::kFloat, c10::kHalf, true, 10.0021}};
  std::vector<AccumulationResult> out;
  for (const auto& v : variants) {
    auto acc = torch::zeros({}, torch::TensorOptions().dtype(v.acc));
    // The increment is rounded to its dtype once (0.01 in fp16 is 0.010002136...); that rounding,
    // not the accumulation, is why both fp16-increment variants land at 10.0021.
    auto inc = torch::scalar_tensor(increment, torch::TensorOptions().dtype(v.inc));
    if (v.cast_to_acc) inc = inc.to(v.acc);
    // In-place add keeps the accumulator's dtype: an fp16 `inc` is promoted to fp32 per step, while
    // an fp16 accumulator rounds every partial sum to 11 mantissa bits (the 9.9531 drift).
    for (int64_t i = 0; i < steps; ++i) acc.add_(inc);
    out.push_back({v.id, dtype_name(v.acc), dtype_name(v.inc), dtype_name(inc.scalar_type()),
                   acc.item<double>(), handout ? v.expected : 0.0});
  }
  return out;
}

AutocastDtypes run_autocast_toy(c10::Device device, c10::ScalarType dtype, int64_t in_features,
                                int64_t out_features, int64_t batch, uint64_t seed) {
  AutocastDtypes r;
  r.device = device.str();
  r.autocast = dtype_name(dtype);
  try {
    torch::manual_seed(seed);
    torch::nn::Linear fc1(torch::nn::LinearOptions(in_features, 10).bias(false));
    torch::nn::LayerNorm ln(torch::nn::LayerNormOptions({10}));
    torch::nn::Linear fc2(torch::nn::LinearOptions(10, out_features).bias(false));
    fc1->to(device);
    ln->to(device);
    fc2->to(device);
    auto x = torch::randn({batch, in_features}, torch::TensorOptions().device(device));
    auto y = torch::randint(out_features, {batch}, torch::TensorOptions().dtype(torch::kLong).device(device));
    torch::Tensor loss;
    {
      // AutocastScope treats fp32 as "off"; the lab only ever asks for fp16 or bf16.
      AutocastScope autocast(device.type(), dtype);
      auto h1 = fc1(x);
      auto h2 = torch::relu(h1);
      auto h3 = ln(h2);
      auto logits = fc2(h3);
      loss = torch::nn::functional::cross_entropy(logits, y);
      r.fc1_out = dtype_name(h1.scalar_type());
      r.relu_out = dtype_name(h2.scalar_type());
      r.layernorm_out = dtype_name(h3.scalar_type());
      r.logits = dtype_name(logits.scalar_type());
      r.loss = dtype_name(loss.scalar_type());
    }
    loss.backward();  // outside the autocast region, as the PyTorch docs recommend
    // Every parameter should share one dtype; report a mix honestly instead of the first one.
    std::vector<torch::Tensor> params = fc1->parameters();
    for (auto& p : ln->parameters()) params.push_back(p);
    for (auto& p : fc2->parameters()) params.push_back(p);
    auto join_unique = [](std::vector<std::string> names) {
      std::sort(names.begin(), names.end());
      names.erase(std::unique(names.begin(), names.end()), names.end());
      std::string s;
      for (const auto& n : names) s += (s.empty() ? "" : "/") + n;
      return s;
    };
    std::vector<std::string> pd, gd;
    for (const auto& p : params) {
      pd.push_back(dtype_name(p.scalar_type()));
      gd.push_back(p.grad().defined() ? dtype_name(p.grad().scalar_type()) : "none");
    }
    r.params = join_unique(pd);
    r.grads = join_unique(gd);
  } catch (const std::exception& e) {
    r = AutocastDtypes{device.str(), dtype_name(dtype)};
    r.error = error_message(e);
  }
  return r;
}

}  // namespace lmscale
