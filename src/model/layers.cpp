// Transformer building blocks; see layers.h.
#include "model/layers.h"

#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/torch.h>

#include <cmath>

#include "core/autocast.h"
#include "model/fp8_linear.h"
#include "ops/fused_rmsnorm.h"
#include "ops/fused_swiglu.h"

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

namespace {
// The weight gradient dy2ᵀ · x2 of bf16 operands, accumulated and returned in fp32. On CUDA the GEMM
// writes fp32 itself (aten::mm.dtype); the CPU has no such kernel, so the operands are upcast first,
// which gives the same exact products with fp32 sums.
torch::Tensor weight_gradient_fp32(const torch::Tensor& dy2, const torch::Tensor& x2) {
  if (dy2.is_cuda()) return at::mm(dy2.t(), x2, torch::kFloat);
  return at::mm(dy2.t().to(torch::kFloat), x2.to(torch::kFloat));
}

// The slots a destination gives `weights` as one (sum of rows, cols) tensor when they are row blocks of
// one contiguous tensor in order, in one dtype; undefined otherwise (autograd's .grad is used then).
torch::Tensor stacked_slots(WeightGradDestination* destination, at::TensorList weights) {
  if (!destination) return {};
  std::vector<torch::Tensor> slots;
  for (const auto& w : weights) {
    auto s = destination->slot(w);
    if (!s.defined() || !s.is_contiguous() || s.sizes() != w.sizes() ||
        (s.scalar_type() != torch::kFloat && s.scalar_type() != torch::kBFloat16))
      return {};
    if (!slots.empty() && (s.scalar_type() != slots[0].scalar_type() || !s.storage().is_alias_of(slots[0].storage()) ||
                           s.storage_offset() != slots.back().storage_offset() + slots.back().numel()))
      return {};
    slots.push_back(s);
  }
  int64_t rows = 0;
  for (const auto& s : slots) rows += s.size(0);
  const auto& first = slots.front();
  return first.as_strided({rows, first.size(1)}, {first.size(1), 1}, first.storage_offset());
}

// See linear_on_bf16_copy (layers.h).
struct LinearOnBf16Copy : torch::autograd::Function<LinearOnBf16Copy> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& copy, at::TensorList weights, WeightGradDestination* destination);
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g);
};

torch::Tensor LinearOnBf16Copy::forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                        const torch::Tensor& copy, at::TensorList weights,
                                        WeightGradDestination* destination) {
  auto xb = x.to(torch::kBFloat16);
  std::vector<torch::Tensor> saved{xb, copy};
  // The weights themselves only to ask the destination for their slots (a saved leaf costs nothing).
  if (destination) saved.insert(saved.end(), weights.begin(), weights.end());
  ctx->save_for_backward(saved);
  ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
  ctx->saved_data["blocks"] = static_cast<int64_t>(weights.size());
  ctx->saved_data["destination"] = reinterpret_cast<int64_t>(destination);
  return at::linear(xb, copy);
}

torch::autograd::tensor_list LinearOnBf16Copy::backward(torch::autograd::AutogradContext* ctx,
                                                        torch::autograd::tensor_list g) {
  const auto saved = ctx->get_saved_variables();
  const auto& xb = saved[0];
  const auto& copy = saved[1];
  const auto blocks = ctx->saved_data["blocks"].toInt();
  auto* destination = reinterpret_cast<WeightGradDestination*>(ctx->saved_data["destination"].toInt());
  auto dy2 = g[0].to(torch::kBFloat16).reshape({-1, copy.size(0)});
  torch::autograd::tensor_list grads;
  if (ctx->needs_input_grad(0)) {
    const auto x_dtype = static_cast<c10::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    grads.push_back(at::mm(dy2, copy).view(xb.sizes()).to(x_dtype));
  } else {
    grads.emplace_back();
  }
  grads.emplace_back();  // the copy: a buffer, written by the optimizer, never trained
  const auto x2 = xb.reshape({-1, copy.size(1)});
  std::vector<torch::Tensor> weights(saved.begin() + 2, saved.end());
  if (auto slot = stacked_slots(destination, weights); slot.defined()) {
    // Straight into the destination: fp32 sums of bf16 products, written once in the slot's dtype.
    if (slot.scalar_type() == torch::kBFloat16)
      at::mm_out(slot, dy2.t(), x2);
    else if (dy2.is_cuda())
      at::mm_out(slot, dy2.t(), x2, torch::kFloat);
    else
      slot.copy_(weight_gradient_fp32(dy2, x2));
    for (const auto& w : weights) destination->written(w);
    for (int64_t i = 0; i < blocks; ++i) grads.emplace_back();
  } else {
    auto dw = weight_gradient_fp32(dy2, x2);
    for (auto& part : dw.chunk(blocks, 0)) grads.push_back(part);
  }
  grads.emplace_back();  // the destination: not a tensor
  return grads;
}
}  // namespace

torch::Tensor linear_on_bf16_copy(const torch::Tensor& x, const torch::Tensor& copy, at::TensorList weights,
                                  WeightGradDestination* destination) {
  return LinearOnBf16Copy::apply(x, copy, weights, destination);
}

bool LinearImpl::bf16_copy_current() const {
  const auto dev = weight.device().type();
  return weight_bf16.defined() && weight._version() == weight_bf16_version && at::autocast::is_autocast_enabled(dev) &&
         at::autocast::get_autocast_dtype(dev) == torch::kBFloat16;
}

torch::Tensor LinearImpl::autocast_weight() { return bf16_copy_current() ? weight_bf16 : weight; }

torch::Tensor LinearImpl::attach_bf16_copy() {
  torch::NoGradGuard no_grad;
  weight_bf16 = weight.detach().to(torch::kBFloat16).contiguous();
  weight_bf16_version = weight._version();
  return weight_bf16;
}

bool LinearImpl::uses_fp8(const torch::Tensor& x) const {
  const auto dev = weight.device().type();
  return fp8 && at::autocast::is_autocast_enabled(dev) && at::autocast::get_autocast_dtype(dev) == torch::kBFloat16 &&
         fp8_linear_ok(x, weight.size(0));
}

const ops::Fp8Tensor* LinearImpl::fp8_weight() const {
  return weight_fp8.data.defined() && bf16_copy_current() ? &weight_fp8 : nullptr;
}

ops::Fp8AmaxSlot LinearImpl::fp8_amax_slot(Fp8Operand operand) const {
  const auto dev = weight.device().type();
  const bool on = fp8 && fp8_producer_amax && at::autocast::is_autocast_enabled(dev) &&
                  at::autocast::get_autocast_dtype(dev) == torch::kBFloat16;
  if (!on) return {};
  auto slot = ops::new_fp8_amax_slot();
  const auto& history = operand == Fp8Operand::kInput ? fp8_history_x
                        : operand == Fp8Operand::kOutputGrad ? fp8_history_dy : torch::Tensor();
  if (history.defined())  // X in e4m3, dY in e5m2, as linear_fp8 casts them
    slot->attach_history(history, operand == Fp8Operand::kInput ? torch::kFloat8_e4m3fn : torch::kFloat8_e5m2,
                         fp8_history_seeded);
  return slot;
}

torch::Tensor LinearImpl::fp8_gemm(const torch::Tensor& x, const ops::Fp8Tensor* quantized_x,
                                   const ops::Fp8AmaxSlot& dy_amax) {
  return linear_fp8(x, bf16_copy_current() ? weight_bf16 : weight, {weight}, fp8_weight(), quantized_x, dy_amax);
}

torch::Tensor LinearImpl::forward_fp8(const torch::Tensor& x, const ops::Fp8Tensor* quantized_x,
                                      const ops::Fp8AmaxSlot& dy_amax) {
  TORCH_CHECK(uses_fp8(x), "Linear::forward_fp8: this layer does not take the FP8 path for x ", x.sizes());
  return fp8_gemm(x, quantized_x, dy_amax);
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  if (uses_fp8(x)) return fp8_gemm(x, nullptr, {});
  if (bf16_copy_current() && torch::GradMode::is_enabled() && weight.requires_grad())
    return linear_on_bf16_copy(x, weight_bf16, {weight}, grad_destination);
  return torch::linear(x, autocast_weight());
}

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
  // x · rsqrt(mean(x²) + eps) · g in one op: on CUDA, one fused kernel forward and one backward
  // where the op-by-op form launches six and about ten (the step is launch-bound: docs/results).
  // With x and g of one dtype (fp32 here) it is exact fp32 math, as the spec asks.
  auto x32 = at_least_fp32(x);
  return at::rms_norm(x32, {x32.size(-1)}, gain, eps).to(x.scalar_type());
}

std::pair<torch::Tensor, torch::Tensor> RMSNormImpl::add_forward(const torch::Tensor& x, const torch::Tensor& residual,
                                                                 const ops::Fp8AmaxSlot& y_amax,
                                                                 const ops::Fp8AmaxSlot& dresidual_amax) {
  const auto dev = x.device().type();
  const auto h_dtype = residual.defined() ? at::promote_types(x.scalar_type(), residual.scalar_type()) : x.scalar_type();
  const bool autocast = at::autocast::is_autocast_enabled(dev) && x.is_floating_point();
  return ops::rms_norm(x, residual, gain, eps, autocast ? at::autocast::get_autocast_dtype(dev) : h_dtype, y_amax,
                          dresidual_amax);
}

SwiGLUImpl::SwiGLUImpl(int64_t d_model, int64_t d_ff) {
  w1 = register_module("w1", Linear(d_model, d_ff));
  w2 = register_module("w2", Linear(d_ff, d_model));
  w3 = register_module("w3", Linear(d_model, d_ff));
}

torch::Tensor SwiGLUImpl::forward(const torch::Tensor& x, const ops::Fp8AmaxSlot& x_amax,
                                  const ops::Fp8AmaxSlot& dy_amax) {
  auto xc = cast_for_autocast(x);  // once for W1 and W3
  torch::Tensor a, b;
  ops::Fp8AmaxSlot da_amax, db_amax;  // W1's and W3's dY, written by the gate's backward (fused_gate)
  if (w1->uses_fp8(xc) && w3->uses_fp8(xc)) {
    // One amax (x's producer's when it recorded one) and one cast of the input both GEMMs read.
    const auto qx = quantize_fp8_input(xc, x_amax);
    if (fused_gate)
      da_amax = w1->fp8_amax_slot(Fp8Operand::kOutputGrad), db_amax = w3->fp8_amax_slot(Fp8Operand::kOutputGrad);
    a = w1->forward_fp8(xc, &qx, da_amax);
    b = w3->forward_fp8(xc, &qx, db_amax);
  } else {
    a = w1(xc);
    b = w3(xc);
  }
  // Only when W2 will take the FP8 path (gate has a's shape): under delayed scaling the gate kernel
  // then writes no bf16 gate at all.
  ops::Fp8AmaxSlot gate_amax =
      fused_gate && w2->uses_fp8(a) ? w2->fp8_amax_slot(Fp8Operand::kInput) : ops::Fp8AmaxSlot();
  auto gate = fused_gate ? ops::swiglu(a, b, gate_amax, da_amax, db_amax) : torch::silu(a) * b;
  if (!w2->uses_fp8(gate)) return w2(gate);
  const auto qgate = quantize_fp8_input(gate, gate_amax);
  return w2->forward_fp8(gate, &qgate, dy_amax);
}

RotaryEmbeddingImpl::RotaryEmbeddingImpl(double theta, int64_t d_head, int64_t max_seq_len) {
  TORCH_CHECK(d_head % 2 == 0, "RoPE rotates pairs of elements: the head dim must be even, got ", d_head);
  // angle[t, k] = t · θ^(−2k/D), k = 0 .. D/2-1
  auto k = torch::arange(0, d_head / 2, torch::kDouble);
  auto inv_freq = torch::pow(theta, -2.0 * k / static_cast<double>(d_head));
  auto pos = torch::arange(max_seq_len, torch::kDouble);
  auto angle = torch::outer(pos, inv_freq);
  rotation = register_buffer("rotation", torch::stack({angle.cos(), angle.sin()}, -1).to(torch::kFloat));
}

namespace {
// view_as_complex needs the pair dim innermost and dense, and every other stride and the offset even.
bool pairs_viewable_as_complex(const torch::Tensor& t) {
  if (t.stride(-1) != 1 || t.storage_offset() % 2) return false;
  for (int64_t d = 0; d + 1 < t.dim(); ++d)
    if (t.stride(d) % 2 && t.size(d) > 1) return false;
  return true;
}
}  // namespace

torch::Tensor RotaryEmbeddingImpl::forward(const torch::Tensor& x) {
  const int64_t T = x.size(-2), D = x.size(-1);
  TORCH_CHECK(T <= rotation.size(0), "sequence length ", T, " exceeds the model's context length ", rotation.size(0),
              ": raise the context length of the model (--model-context) or shorten the input");
  TORCH_CHECK(D == 2 * rotation.size(1), "RoPE was built for head dim ", 2 * rotation.size(1), ", got input with ", D);
  // Pair (2k, 2k+1) is the complex number x_2k + i·x_2k+1, rotated by multiplying with e^(i·angle):
  // one complex multiply (in the promoted dtype, fp32 for bf16 inputs) instead of four products,
  // two sums and a stack, then back to x's dtype.
  const auto dt = at::promote_types(x.scalar_type(), rotation.scalar_type());
  auto xt = x.to(dt);
  if (!pairs_viewable_as_complex(xt)) xt = xt.contiguous();
  auto pairs = torch::view_as_complex(xt.unflatten(-1, {D / 2, 2}));                  // (…, T, D/2)
  auto turn = torch::view_as_complex(rotation.slice(0, 0, T).to(dt));                // (T, D/2), broadcasts
  return torch::view_as_real(pairs * turn).flatten(-2).to(x.scalar_type());
}

}  // namespace lmscale
