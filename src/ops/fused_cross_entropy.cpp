// Bridge to the fused cross-entropy kernels; see fused_cross_entropy.h.
#include "ops/fused_cross_entropy.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#ifdef LMSCALE_HAS_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/fused_cross_entropy_params.h"
#endif

namespace lmscale::ops {

void check_cross_entropy_shapes(const at::Tensor& logits, const at::Tensor& targets) {
  TORCH_CHECK(logits.dim() >= 1 && targets.dim() == logits.dim() - 1 &&
                  targets.sizes() == logits.sizes().slice(0, logits.dim() - 1),
              "cross_entropy: logits ", logits.sizes(), " need targets of shape (…) = the logits' shape without "
              "its last (vocabulary) dim, got ", targets.sizes());
  TORCH_CHECK(targets.scalar_type() == at::kLong, "cross_entropy: targets must be int64, got ", targets.scalar_type());
  TORCH_CHECK(logits.numel() > 0, "cross_entropy: no positions or an empty vocabulary (logits ", logits.sizes(), ")");
}

namespace {

#ifdef LMSCALE_HAS_KERNELS
kernels::CrossEntropyParams params_for(const at::Tensor& logits2d, const at::Tensor& targets) {
  kernels::CrossEntropyParams p;
  p.logits = logits2d.data_ptr();
  p.logits_stride = logits2d.stride(0);
  p.targets = targets.data_ptr<int64_t>();
  p.rows = logits2d.size(0);
  p.vocab = logits2d.size(1);
  p.dtype = logits2d.scalar_type() == at::kBFloat16 ? kernels::FusedDtype::kBF16 : kernels::FusedDtype::kFP32;
  return p;
}

struct CrossEntropyKernel : torch::autograd::Function<CrossEntropyKernel> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& targets_in) {
    c10::cuda::CUDAGuard guard(logits.device());
    auto z = logits.reshape({-1, logits.size(-1)}).contiguous();  // (rows, V), a view of the LM head output
    auto targets = targets_in.reshape({-1}).contiguous();
    auto opts = z.options().dtype(at::kFloat);
    auto loss = at::empty({z.size(0)}, opts), stats = at::empty({2, z.size(0)}, opts);  // max, log-sum
    auto p = params_for(z, targets);
    p.loss_out = loss.data_ptr<float>();
    p.row_max = stats[0].data_ptr<float>();
    p.row_log_sum = stats[1].data_ptr<float>();
    kernels::run_cross_entropy_fwd(p, at::cuda::getCurrentCUDAStream().stream());
    ctx->save_for_backward({z, targets, stats});
    ctx->saved_data["shape"] = logits.sizes().vec();
    return loss.mean();
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    auto saved = ctx->get_saved_variables();
    const auto &z = saved[0], &targets = saved[1], &stats = saved[2];
    c10::cuda::CUDAGuard guard(z.device());
    auto grad_loss = g[0].to(at::kFloat).contiguous();  // stays on the device: no sync
    auto dz = at::empty_like(z);
    auto p = params_for(z, targets);
    p.row_max = stats[0].data_ptr<float>();
    p.row_log_sum = stats[1].data_ptr<float>();
    p.grad_loss = grad_loss.data_ptr<float>();
    p.grad_factor = 1.f / static_cast<float>(z.size(0));
    p.dlogits_out = dz.data_ptr();
    kernels::run_cross_entropy_bwd(p, at::cuda::getCurrentCUDAStream().stream());
    return {dz.view(ctx->saved_data["shape"].toIntVector()), at::Tensor()};
  }
};
#endif

}  // namespace

bool cross_entropy_mean_uses_kernel(const at::Tensor& logits, const at::Tensor& targets) {
#ifdef LMSCALE_HAS_KERNELS
  return logits.is_cuda() && (logits.scalar_type() == at::kBFloat16 || logits.scalar_type() == at::kFloat) &&
         targets.device() == logits.device() && targets.scalar_type() == at::kLong;
#else
  (void)logits, (void)targets;
  return false;
#endif
}

at::Tensor cross_entropy_mean(const at::Tensor& logits, const at::Tensor& targets) {
  check_cross_entropy_shapes(logits, targets);
#ifdef LMSCALE_HAS_KERNELS
  if (cross_entropy_mean_uses_kernel(logits, targets)) return CrossEntropyKernel::apply(logits, targets);
#endif
  return cross_entropy_mean_reference(logits, targets);
}

at::Tensor cross_entropy_mean_reference(const at::Tensor& logits, const at::Tensor& targets) {
  check_cross_entropy_shapes(logits, targets);
  auto flat = logits.reshape({-1, logits.size(-1)});
  if (flat.element_size() < 4) flat = flat.to(at::kFloat);
  return at::nll_loss(at::log_softmax(flat, -1), targets.reshape({-1}));
}

}  // namespace lmscale::ops
