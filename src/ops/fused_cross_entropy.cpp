// The one bridge to the fused cross-entropy kernels; see fused_cross_entropy.h.
#include "ops/fused_cross_entropy.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "ops/fused_checks.h"

#ifdef LMSCALE_HAS_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/fused_cross_entropy_params.h"
#endif

namespace lmscale::ops {
namespace {

using at::Tensor;

void check_cross_entropy(const char* op, const Tensor& logits, const Tensor& targets, int64_t reduction,
                         double label_smoothing) {
  TORCH_CHECK(logits.dim() >= 1 && targets.dim() == logits.dim() - 1 &&
                  targets.sizes() == logits.sizes().slice(0, logits.dim() - 1),
              "cross_entropy: logits ", logits.sizes(), " need targets of shape (…) = the logits' shape without "
              "its last (vocabulary) dim, got ", targets.sizes());
  TORCH_CHECK(targets.scalar_type() == at::kLong, "cross_entropy: targets must be int64 class indices, got ",
              targets.scalar_type());
  check_one_device(op, {{"logits", &logits}, {"targets", &targets}});
  check_floating(op, "logits", logits);
  TORCH_CHECK(logits.size(-1) > 0, "cross_entropy: the vocabulary (the last dim of logits ", logits.sizes(),
              ") is empty");
  TORCH_CHECK(reduction >= kReductionNone && reduction <= kReductionSum,
              "cross_entropy: reduction must be 0 (none), 1 (mean) or 2 (sum), got ", reduction);
  TORCH_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
              "cross_entropy: label_smoothing must be between 0.0 and 1.0, got ", label_smoothing);
}

// The reference's check (the kernel makes such a row's loss NaN instead: checking would stall the GPU).
void check_targets_in_range(const Tensor& targets, int64_t V, std::optional<int64_t> ignore_index) {
  auto bad = (targets < 0).logical_or_(targets >= V);
  if (ignore_index) bad.logical_and_(targets != *ignore_index);
  if (!bad.any().item<bool>()) return;
  const int64_t at_pos = bad.nonzero()[0][0].item<int64_t>();
  TORCH_CHECK(false, "cross_entropy: target ", targets[at_pos].item<int64_t>(), " (position ", at_pos,
              " of the flattened targets) is outside the vocabulary [0, ", V, ")",
              ignore_index ? " and is not ignore_index (" + std::to_string(*ignore_index) + ")" : std::string(),
              ". Targets are class indices below V = logits.shape[-1]; mark positions to skip "
              "(padding) with ignore_index");
}

// Which rows count (targets not ignore_index), or undefined when every row does.
Tensor counted_rows(const Tensor& targets, std::optional<int64_t> ignore_index) {
  return ignore_index ? targets != *ignore_index : Tensor();
}

// The reduction of the per-row losses (rows), given which rows count.
Tensor reduce_losses(const Tensor& losses, const Tensor& counted, int64_t reduction, at::IntArrayRef shape) {
  if (reduction == kReductionNone) return losses.view(shape);
  if (reduction == kReductionSum) return losses.sum();
  if (!counted.defined()) return losses.mean();
  return losses.sum() / counted.sum().to(losses.scalar_type());  // 0/0 = NaN when every target is ignored, as PyTorch
}

#ifdef LMSCALE_HAS_KERNELS
// z (rows, V) with a contiguous last dim, targets (rows) contiguous int64; stats (2, rows) fp32.
kernels::CrossEntropyParams params_for(const Tensor& z, const Tensor& targets, const Tensor& stats,
                                       std::optional<int64_t> ignore_index, double label_smoothing) {
  kernels::CrossEntropyParams p;
  p.logits = z.data_ptr();
  p.logits_stride = z.stride(0);
  p.targets = targets.data_ptr<int64_t>();
  p.rows = z.size(0);
  p.vocab = z.size(1);
  p.dtype = fused_dtype(z.scalar_type());
  p.row_max = stats[0].data_ptr<float>();
  p.row_log_sum = stats[1].data_ptr<float>();
  p.ignore_index = ignore_index.value_or(kernels::kNoIgnoreIndex);
  p.label_smoothing = static_cast<float>(label_smoothing);
  return p;
}
#endif

struct CrossEntropyFunction : torch::autograd::Function<CrossEntropyFunction> {
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& logits, const Tensor& targets) {
    auto [loss, stats] = cross_entropy_forward(logits, targets, kReductionMean, std::nullopt, 0.0);
    ctx->save_for_backward({logits, targets, stats});
    return loss;
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    auto saved = ctx->get_saved_variables();
    return {cross_entropy_backward(g[0], saved[0], saved[1], saved[2], kReductionMean, std::nullopt, 0.0), Tensor()};
  }
};

}  // namespace

bool cross_entropy_uses_kernel(const Tensor& logits, const Tensor& targets) {
#ifdef LMSCALE_HAS_KERNELS
  return logits.is_cuda() && fused_kernel_dtype(logits.scalar_type()) && targets.device() == logits.device();
#else
  (void)logits, (void)targets;
  return false;
#endif
}

std::tuple<Tensor, Tensor> cross_entropy_forward(const Tensor& logits, const Tensor& targets_in, int64_t reduction,
                                                 std::optional<int64_t> ignore_index, double label_smoothing) {
  check_cross_entropy("cross_entropy_forward", logits, targets_in, reduction, label_smoothing);
  const int64_t V = logits.size(-1);
  auto z = logits.reshape({-1, V});
  auto targets = targets_in.reshape({-1});
  const auto counted = counted_rows(targets, ignore_index);
  if (!cross_entropy_uses_kernel(logits, targets_in)) {
    check_targets_in_range(targets, V, ignore_index);
    auto zm = z.to(fused_math_dtype(logits.scalar_type()));
    auto m = std::get<0>(zm.max(-1, /*keepdim=*/true));
    auto l = (zm - m).exp().sum(-1).log();
    auto safe_targets = counted.defined() ? targets.masked_fill(counted.logical_not(), 0) : targets;
    auto picked = zm.gather(-1, safe_targets.unsqueeze(-1)).squeeze(-1);
    m = m.squeeze(-1);
    auto losses = l - (picked - m);
    if (label_smoothing != 0.0) losses = (1 - label_smoothing) * losses + label_smoothing * (l - (zm.mean(-1) - m));
    if (counted.defined()) losses = losses.masked_fill(counted.logical_not(), 0);
    return {reduce_losses(losses, counted, reduction, targets_in.sizes()), at::stack({m, l}, 0)};
  }
#ifdef LMSCALE_HAS_KERNELS
  c10::cuda::CUDAGuard guard(logits.device());
  if (z.stride(-1) != 1) z = z.contiguous();
  targets = targets.contiguous();
  auto opts = z.options().dtype(at::kFloat);
  auto losses = at::empty({z.size(0)}, opts), stats = at::empty({2, z.size(0)}, opts);  // max, log-sum
  auto p = params_for(z, targets, stats, ignore_index, label_smoothing);
  p.loss_out = losses.data_ptr<float>();
  kernels::run_cross_entropy_fwd(p, at::cuda::getCurrentCUDAStream().stream());
  return {reduce_losses(losses, counted, reduction, targets_in.sizes()), stats};
#else
  TORCH_CHECK(false, "unreachable");
#endif
}

Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets_in,
                              const Tensor& stats, int64_t reduction, std::optional<int64_t> ignore_index,
                              double label_smoothing) {
  check_cross_entropy("cross_entropy_backward", logits, targets_in, reduction, label_smoothing);
  const int64_t V = logits.size(-1);
  auto z = logits.reshape({-1, V});
  auto targets = targets_in.reshape({-1});
  const int64_t rows = z.size(0);
  TORCH_CHECK(stats.dim() == 2 && stats.size(0) == 2 && stats.size(1) == rows,
              "cross_entropy_backward: stats must be the forward's (2, rows); got ", stats.sizes());
  TORCH_CHECK(reduction == kReductionNone ? grad_loss.sizes() == targets_in.sizes() : grad_loss.numel() == 1,
              "cross_entropy_backward: grad_loss ", grad_loss.sizes(), " must be ",
              reduction == kReductionNone ? "the targets' shape (reduction none)" : "one number (a reduced loss)");
  check_one_device("cross_entropy_backward", {{"logits", &logits}, {"stats", &stats}});
  const auto counted = counted_rows(targets, ignore_index);
  if (cross_entropy_uses_kernel(logits, targets_in) && stats.scalar_type() == at::kFloat) {
#ifdef LMSCALE_HAS_KERNELS
    c10::cuda::CUDAGuard guard(logits.device());
    z = z.contiguous();
    targets = targets.contiguous();
    auto st = stats.contiguous();
    auto g = grad_loss.to(z.device(), at::kFloat);  // stays on the device: no sync
    auto p = params_for(z, targets, st, ignore_index, label_smoothing);
    if (reduction == kReductionMean && counted.defined()) g = g / counted.sum();
    // Every row counted: the mean's 1/rows is the kernel's factor, with no count on the device.
    if (reduction == kReductionMean && !counted.defined()) p.grad_factor = 1.f / static_cast<float>(rows);
    g = g.reshape({reduction == kReductionNone ? rows : 1}).contiguous();
    auto dz = at::empty_like(z);
    p.grad_loss = g.data_ptr<float>();
    p.grad_loss_stride = reduction == kReductionNone ? 1 : 0;
    p.dlogits_out = dz.data_ptr();
    kernels::run_cross_entropy_bwd(p, at::cuda::getCurrentCUDAStream().stream());
    return dz.view(logits.sizes());
#endif
  }
  const auto mt = stats.scalar_type();
  auto zm = z.to(mt);
  auto probs = (zm - stats[0].unsqueeze(-1) - stats[1].unsqueeze(-1)).exp();
  if (label_smoothing != 0.0) probs = probs - label_smoothing / static_cast<double>(V);
  auto safe_targets = (counted.defined() ? targets.masked_fill(counted.logical_not(), 0) : targets).unsqueeze(-1);
  auto dz = probs.scatter_add(-1, safe_targets, at::full({rows, 1}, label_smoothing - 1.0, probs.options()));
  auto g = grad_loss.to(z.device(), mt);
  if (reduction == kReductionMean) g = counted.defined() ? g / counted.sum().to(mt) : g / static_cast<double>(rows);
  dz = dz * g.reshape({reduction == kReductionNone ? rows : 1, 1});
  if (counted.defined()) dz = dz.masked_fill(counted.logical_not().unsqueeze(-1), 0);
  return dz.to(logits.scalar_type()).contiguous().view(logits.sizes());
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets) { return CrossEntropyFunction::apply(logits, targets); }

}  // namespace lmscale::ops
