// Bridge to the fused residual-add + RMSNorm kernels; see fused_rmsnorm.h.
#include "ops/fused_rmsnorm.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#ifdef LMSCALE_HAS_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/fp8_cast_params.h"
#include "kernels/fused_rmsnorm_params.h"
#include "ops/fp8_history.h"
#endif

namespace lmscale::ops {
namespace {

void check_shapes(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& gain) {
  TORCH_CHECK(x.dim() >= 1 && gain.dim() == 1 && gain.size(0) == x.size(-1), "add_rmsnorm: gain ", gain.sizes(),
              " does not match the last dim of x ", x.sizes());
  TORCH_CHECK(!residual.defined() || residual.sizes() == x.sizes(), "add_rmsnorm: residual ", residual.sizes(),
              " and x ", x.sizes(), " must have one shape");
}

bool kernel_dtype(c10::ScalarType t) { return t == at::kBFloat16 || t == at::kFloat; }

#ifdef LMSCALE_HAS_KERNELS
kernels::FusedDtype fused_dtype(c10::ScalarType t) {
  return t == at::kBFloat16 ? kernels::FusedDtype::kBF16 : kernels::FusedDtype::kFP32;
}

// Inputs: x, residual (x again when there is none: custom Functions take no undefined inputs), gain.
// Outputs: (h, y) with a residual, (y) without.
struct AddRmsNormKernel : torch::autograd::Function<AddRmsNormKernel> {
  static torch::autograd::tensor_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x_in,
                                              const at::Tensor& residual_in, const at::Tensor& gain,
                                              bool has_residual, double eps, int64_t y_dtype,
                                              const Fp8AmaxSlot& y_amax, const Fp8AmaxSlot& dresidual_amax) {
    c10::cuda::CUDAGuard guard(x_in.device());
    auto x = x_in.contiguous();
    auto residual = has_residual ? residual_in.contiguous() : at::Tensor();
    const int64_t C = x.size(-1), rows = x.numel() / C;
    kernels::AddRmsNormFwdParams p;
    p.x = x.data_ptr();
    p.gain = gain.data_ptr<float>();
    p.rows = rows;
    p.cols = static_cast<int>(C);
    p.eps = static_cast<float>(eps);
    p.x_dtype = fused_dtype(x.scalar_type());
    at::Tensor h = x;
    if (has_residual) {
      h = at::empty_like(x);
      p.residual = residual.data_ptr();
      p.residual_dtype = fused_dtype(residual.scalar_type());
      p.h_out = h.data_ptr();
    }
    auto y = at::empty(x.sizes(), x.options().dtype(static_cast<c10::ScalarType>(y_dtype)));
    auto rstd = at::empty({rows}, x.options().dtype(at::kFloat));
    p.y_dtype = fused_dtype(y.scalar_type());
    p.rstd_out = rstd.data_ptr<float>();
    auto stream = at::cuda::getCurrentCUDAStream().stream();
    if (y_amax && y_amax->delayed() && y.scalar_type() == at::kBFloat16 && rows % 16 == 0 && C % 16 == 0) {
      // Delayed scaling: the GEMM reads only y's FP8 form (row-major from the kernel, the transpose from
      // its bytes); y is handed on unwritten (Fp8Amax::record_quantized). The backward reads h, not y.
      Fp8Tensor q = fp8_delayed_outputs(y_amax, y, p.y_fp8);
      p.y_fp8.data_t = nullptr;  // the kernel walks rows: the transpose is its own pass below
      kernels::run_add_rmsnorm_fwd(p, stream);
      kernels::run_fp8_transpose(q.data.data_ptr(), q.data_t.data_ptr(), rows, C, stream);
      y_amax->record_quantized(y, std::move(q));
    } else {
      p.y_out = y.data_ptr();
      at::Tensor y_amax_bits = y_amax ? empty_fp8_amax_bits(y) : at::Tensor();
      if (y_amax) p.y_amax = reinterpret_cast<uint32_t*>(y_amax_bits.data_ptr<int32_t>());
      kernels::run_add_rmsnorm_fwd(p, stream);
      if (y_amax) y_amax->record(y, y_amax_bits);
    }
    ctx->save_for_backward({h, gain, rstd});
    if (has_residual) save_fp8_amax_slot(ctx, "dresidual_amax", dresidual_amax);
    ctx->saved_data["has_residual"] = has_residual;
    ctx->saved_data["residual_dtype"] = static_cast<int64_t>(residual_in.scalar_type());
    if (!has_residual) return {y};
    return {h, y};
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    auto saved = ctx->get_saved_variables();
    const auto& h = saved[0];
    const auto& gain = saved[1];
    const auto& rstd = saved[2];
    const bool has_residual = ctx->saved_data["has_residual"].toBool();
    const auto residual_dtype = static_cast<c10::ScalarType>(ctx->saved_data["residual_dtype"].toInt());
    at::Tensor dh_in = has_residual && g[0].defined() ? g[0].contiguous() : at::Tensor();
    const auto& dy_in = g[has_residual ? 1 : 0];
    c10::cuda::CUDAGuard guard(h.device());
    const int64_t C = h.size(-1), rows = h.numel() / C;
    // y unused downstream: its gradient is zero (not worth a special kernel).
    auto dy = dy_in.defined() ? dy_in.contiguous() : at::zeros(h.sizes(), h.options());
    auto dx = at::empty_like(h);
    const bool separate_dres = has_residual && residual_dtype != h.scalar_type();
    auto dres = separate_dres ? at::empty(h.sizes(), h.options().dtype(residual_dtype)) : dx;
    auto partial = at::empty({kernels::add_rmsnorm_bwd_partial_rows(rows), C}, h.options().dtype(at::kFloat));
    auto dgain = at::empty({C}, h.options().dtype(at::kFloat));
    kernels::AddRmsNormBwdParams p;
    p.h = h.data_ptr();
    p.dy = dy.data_ptr();
    p.dh_in = dh_in.defined() ? dh_in.data_ptr() : nullptr;
    p.gain = gain.data_ptr<float>();
    p.rstd = rstd.data_ptr<float>();
    p.dx_out = dx.data_ptr();
    p.dresidual_out = separate_dres ? dres.data_ptr() : nullptr;
    p.dgain_partial = partial.data_ptr<float>();
    p.dgain_out = dgain.data_ptr<float>();
    p.rows = rows;
    p.cols = static_cast<int>(C);
    p.h_dtype = fused_dtype(h.scalar_type());
    p.residual_dtype = fused_dtype(separate_dres ? residual_dtype : h.scalar_type());
    p.y_dtype = fused_dtype(dy.scalar_type());
    const auto dres_amax = saved_fp8_amax_slot(ctx, "dresidual_amax");  // only saved with a residual
    at::Tensor dres_amax_bits = dres_amax ? empty_fp8_amax_bits(dres) : at::Tensor();
    if (dres_amax) p.dresidual_amax = reinterpret_cast<uint32_t*>(dres_amax_bits.data_ptr<int32_t>());
    kernels::run_add_rmsnorm_bwd(p, at::cuda::getCurrentCUDAStream().stream());
    if (dres_amax) dres_amax->record(dres, dres_amax_bits);
    // One per forward argument: x, residual, gain, has_residual, eps, y_dtype, y_amax, dresidual_amax.
    return {dx, has_residual ? dres : at::Tensor(), dgain, {}, {}, {}, {}, {}};
  }
};
#endif

}  // namespace

bool add_rmsnorm_uses_kernel(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& gain,
                             c10::ScalarType y_dtype) {
#ifdef LMSCALE_HAS_KERNELS
  bool ok = x.is_cuda() && kernel_dtype(x.scalar_type()) && kernel_dtype(y_dtype) && x.dim() >= 1 &&
            x.size(-1) <= kernels::kAddRmsNormMaxCols && gain.is_cuda() && gain.device() == x.device() &&
            gain.scalar_type() == at::kFloat && gain.is_contiguous();
  if (residual.defined())
    ok = ok && residual.device() == x.device() && kernel_dtype(residual.scalar_type()) &&
         at::promote_types(x.scalar_type(), residual.scalar_type()) == x.scalar_type();
  return ok;
#else
  (void)x, (void)residual, (void)gain, (void)y_dtype;
  return false;
#endif
}

std::pair<at::Tensor, at::Tensor> add_rmsnorm(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& gain,
                                              double eps, c10::ScalarType y_dtype, const Fp8AmaxSlot& y_amax,
                                              const Fp8AmaxSlot& dresidual_amax) {
  check_shapes(x, residual, gain);
#ifdef LMSCALE_HAS_KERNELS
  if (x.numel() > 0 && add_rmsnorm_uses_kernel(x, residual, gain, y_dtype)) {
    const bool has_residual = residual.defined();
    auto out = AddRmsNormKernel::apply(x, has_residual ? residual : x, gain, has_residual, eps,
                                       static_cast<int64_t>(y_dtype), y_amax, dresidual_amax);
    if (!has_residual) return {x, out[0]};
    return {out[0], out[1]};
  }
#endif
  // The amax contract with ATen ops: the residual's gradient as autograd hands it over, y as returned.
  auto r = residual.defined() ? record_grad_amax(residual, dresidual_amax) : residual;
  auto [h, y] = add_rmsnorm_reference(x, r, gain, eps, y_dtype);
  y = y.contiguous();
  if (y_amax) y_amax->record(y, fp8_amax(y));
  return {h, y};
}

std::pair<at::Tensor, at::Tensor> add_rmsnorm_reference(const at::Tensor& x, const at::Tensor& residual,
                                                        const at::Tensor& gain, double eps, c10::ScalarType y_dtype) {
  check_shapes(x, residual, gain);
  auto h = residual.defined() ? x + residual : x;
  // The norm in at least fp32 (fp64 stays fp64 for the oracle), as RMSNorm computes it.
  auto hn = h.element_size() < 4 ? h.to(at::kFloat) : h;
  auto y = hn * at::rsqrt(hn.pow(2).mean(-1, /*keepdim=*/true) + eps) * gain.to(hn.scalar_type());
  return {h, y.to(y_dtype)};
}

}  // namespace lmscale::ops
