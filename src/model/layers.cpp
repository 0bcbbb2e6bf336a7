// Transformer building blocks; see layers.h.
#include "model/layers.h"

#include <torch/torch.h>

#include <cmath>

namespace lmscale {

torch::Tensor at_least_fp32(const torch::Tensor& t) {
  return t.element_size() < 4 ? t.to(torch::kFloat) : t;
}

void trunc_normal_(torch::Tensor& t, double std) {
  torch::NoGradGuard no_grad;
  // Sample uniformly between the CDF values of ±3σ, then map back through the inverse CDF.
  const double a = 0.5 * (1.0 + std::erf(-3.0 / std::sqrt(2.0)));
  const double b = 0.5 * (1.0 + std::erf(3.0 / std::sqrt(2.0)));
  t.uniform_(2 * a - 1, 2 * b - 1).erfinv_().mul_(std * std::sqrt(2.0)).clamp_(-3 * std, 3 * std);
}

namespace {
thread_local bool defer_init = false;
}

DeferInitGuard::DeferInitGuard() : prev_(defer_init) { defer_init = true; }
DeferInitGuard::~DeferInitGuard() { defer_init = prev_; }
bool DeferInitGuard::active() { return defer_init; }

void init_parameters(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& m : module.modules(/*include_self=*/true)) {
    if (auto* lin = m->as<LinearImpl>()) {
      lin->reset_parameters();
    } else if (auto* emb = m->as<EmbeddingImpl>()) {
      emb->reset_parameters();
    } else if (auto* norm = m->as<RMSNormImpl>()) {
      norm->gain.fill_(1.0);
    }
  }
}

LinearImpl::LinearImpl(int64_t in, int64_t out) {
  weight = register_parameter("weight", torch::empty({out, in}));
  if (!DeferInitGuard::active()) reset_parameters();
}

void LinearImpl::reset_parameters() {
  trunc_normal_(weight, std::sqrt(2.0 / static_cast<double>(weight.size(0) + weight.size(1))));
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) { return torch::linear(x, weight); }

EmbeddingImpl::EmbeddingImpl(int64_t n, int64_t dim) {
  weight = register_parameter("weight", torch::empty({n, dim}));
  if (!DeferInitGuard::active()) reset_parameters();
}

void EmbeddingImpl::reset_parameters() { trunc_normal_(weight, 1.0); }

torch::Tensor EmbeddingImpl::forward(const torch::Tensor& ids) { return torch::embedding(weight, ids); }

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_) : eps(eps_) {
  gain = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  auto x32 = at_least_fp32(x);
  auto inv_rms = torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (x32 * inv_rms * gain).to(x.scalar_type());
}

SwiGLUImpl::SwiGLUImpl(int64_t d_model, int64_t d_ff) {
  w1 = register_module("w1", Linear(d_model, d_ff));
  w2 = register_module("w2", Linear(d_ff, d_model));
  w3 = register_module("w3", Linear(d_model, d_ff));
}

torch::Tensor SwiGLUImpl::forward(const torch::Tensor& x) { return w2(torch::silu(w1(x)) * w3(x)); }

RotaryEmbeddingImpl::RotaryEmbeddingImpl(double theta, int64_t d_head, int64_t max_seq_len) {
  // angle[t, k] = t · θ^(−2k/D), k = 0 .. D/2-1
  auto k = torch::arange(0, d_head / 2, torch::kDouble);
  auto inv_freq = torch::pow(theta, -2.0 * k / static_cast<double>(d_head));
  auto pos = torch::arange(max_seq_len, torch::kDouble);
  auto angle = torch::outer(pos, inv_freq);
  cos = register_buffer("cos", angle.cos().to(torch::kFloat));
  sin = register_buffer("sin", angle.sin().to(torch::kFloat));
}

torch::Tensor RotaryEmbeddingImpl::forward(const torch::Tensor& x) {
  const int64_t T = x.size(-2);
  TORCH_CHECK(T <= cos.size(0), "sequence length ", T, " exceeds the model's context length ", cos.size(0),
              ": raise the context length of the model (--model-context) or shorten the input");
  auto c = cos.slice(0, 0, T);  // (T, D/2), broadcasts over (B, H)
  auto s = sin.slice(0, 0, T);
  auto x_even = x.slice(-1, 0, c10::nullopt, 2);  // elements 2k
  auto x_odd = x.slice(-1, 1, c10::nullopt, 2);   // elements 2k+1
  auto out_even = x_even * c - x_odd * s;
  auto out_odd = x_even * s + x_odd * c;
  // Interleave back: (…, D/2, 2) → (…, D). Result keeps x's dtype under autocast-free math.
  return torch::stack({out_even, out_odd}, -1).flatten(-2).to(x.scalar_type());
}

}  // namespace lmscale
