// The one bridge to the fused residual-add + RMSNorm kernels; see fused_rmsnorm.h.
#include "ops/fused_rmsnorm.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "ops/fused_checks.h"

#ifdef LMSCALE_HAS_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/fp8_cast_params.h"
#include "kernels/fused_rmsnorm_params.h"
#include "ops/fp8_history.h"
#endif

namespace lmscale::ops {
namespace {

using at::Tensor;

void check_rms_norm(const Tensor& x, const std::optional<Tensor>& residual, const Tensor& weight) {
  const Tensor none;
  check_one_device("rms_norm", {{"x", &x}, {"residual", residual ? &*residual : &none}, {"weight", &weight}});
  check_floating("rms_norm", "x", x);
  check_floating("rms_norm", "weight", weight);
  if (residual) check_floating("rms_norm", "residual", *residual);
  TORCH_CHECK(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1), "rms_norm: weight ", weight.sizes(),
              " must be (C) with C the last dim of x ", x.sizes());
  TORCH_CHECK(!residual || residual->sizes() == x.sizes(), "rms_norm: residual ", residual->sizes(), " and x ",
              x.sizes(), " must have one shape");
  TORCH_CHECK(!residual || at::promote_types(x.scalar_type(), residual->scalar_type()) == x.scalar_type(),
              "rms_norm: x (", x.scalar_type(), ") must be the wider of x and residual (", residual->scalar_type(),
              "): h = x + residual keeps x's dtype. Swap the two arguments.");
}

// Inputs: x, residual (x again when there is none: custom Functions take no undefined inputs), weight.
// Outputs: (h, y) with a residual, (y) without.
struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static torch::autograd::tensor_list forward(torch::autograd::AutogradContext* ctx, const Tensor& x,
                                              const Tensor& residual, const Tensor& weight, bool has_residual,
                                              double eps, int64_t y_dtype, const Fp8AmaxSlot& y_amax,
                                              const Fp8AmaxSlot& dresidual_amax) {
    auto [h, y, rstd] = rms_norm_forward(x, has_residual ? std::optional<Tensor>(residual) : std::nullopt, weight,
                                         eps, static_cast<c10::ScalarType>(y_dtype), y_amax);
    ctx->save_for_backward({has_residual ? h : x, weight, rstd});
    if (has_residual) save_fp8_amax_slot(ctx, "dresidual_amax", dresidual_amax);
    ctx->saved_data["has_residual"] = has_residual;
    ctx->saved_data["residual_dtype"] = static_cast<int64_t>(residual.scalar_type());
    if (!has_residual) return {y};
    return {h, y};
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    auto saved = ctx->get_saved_variables();
    const auto &h = saved[0], &weight = saved[1], &rstd = saved[2];
    const bool has_residual = ctx->saved_data["has_residual"].toBool();
    std::optional<Tensor> dh;
    if (has_residual && g[0].defined()) dh = g[0];
    const auto& dy_in = g[has_residual ? 1 : 0];
    // y unused downstream: its gradient is zero (not worth a special kernel).
    auto dy = dy_in.defined() ? dy_in : at::zeros(h.sizes(), h.options());
    std::optional<c10::ScalarType> residual_dtype;
    if (has_residual) residual_dtype = static_cast<c10::ScalarType>(ctx->saved_data["residual_dtype"].toInt());
    auto [dx, dweight, dres] = rms_norm_backward(dy, dh, h, weight, rstd, residual_dtype,
                                                 saved_fp8_amax_slot(ctx, "dresidual_amax"));
    // The residual's gradient is dx itself unless the residual had a dtype of its own.
    const bool separate_dres = residual_dtype.value_or(h.scalar_type()) != h.scalar_type();
    // One per forward argument: x, residual, weight, has_residual, eps, y_dtype, y_amax, dresidual_amax.
    return {dx, has_residual ? (separate_dres ? dres : dx) : Tensor(), dweight, {}, {}, {}, {}, {}};
  }
};

}  // namespace

bool rms_norm_uses_kernel(const Tensor& x, const std::optional<Tensor>& residual, const Tensor& weight,
                          c10::ScalarType y_dtype) {
#ifdef LMSCALE_HAS_KERNELS
  return x.is_cuda() && fused_kernel_dtype(x.scalar_type()) && fused_kernel_dtype(y_dtype) && x.dim() >= 1 &&
         x.numel() > 0 && x.size(-1) <= kernels::kRmsNormMaxCols && weight.device() == x.device() &&
         weight.scalar_type() == at::kFloat &&
         (!residual || !residual->defined() ||
          (residual->device() == x.device() && fused_kernel_dtype(residual->scalar_type()) &&
           at::promote_types(x.scalar_type(), residual->scalar_type()) == x.scalar_type()));
#else
  (void)x, (void)residual, (void)weight, (void)y_dtype;
  return false;
#endif
}

std::tuple<Tensor, Tensor, Tensor> rms_norm_forward(const Tensor& x_in, const std::optional<Tensor>& residual_in,
                                                    const Tensor& weight_in, double eps,
                                                    std::optional<c10::ScalarType> out_dtype, const Fp8AmaxSlot& y_amax) {
  check_rms_norm(x_in, residual_in, weight_in);
  const auto y_dtype = out_dtype.value_or(x_in.scalar_type());
  const auto lead = x_in.sizes().slice(0, x_in.dim() - 1);
  if (!rms_norm_uses_kernel(x_in, residual_in, weight_in, y_dtype)) {
    // Delayed scaling without the kernels: the dynamic path, whose recorded amax still feeds the history.
    const auto mt = fused_math_dtype(x_in.scalar_type());
    Tensor h = residual_in ? x_in + *residual_in : x_in;
    auto hm = h.to(mt);
    auto rstd = at::rsqrt(hm.pow(2).mean(-1) + eps);
    auto y = (hm * rstd.unsqueeze(-1) * weight_in.to(mt)).to(y_dtype).contiguous();
    if (y_amax) y_amax->record(y, fp8_amax(y));
    return {residual_in ? h.contiguous() : at::empty({0}, x_in.options()), y, rstd.contiguous()};
  }
#ifdef LMSCALE_HAS_KERNELS
  c10::cuda::CUDAGuard guard(x_in.device());
  auto x = x_in.contiguous();
  auto weight = weight_in.contiguous();
  const int64_t C = x.size(-1), rows = x.numel() / C;
  kernels::AddRmsNormFwdParams p;
  p.x = x.data_ptr();
  p.gain = weight.data_ptr<float>();
  p.rows = rows;
  p.cols = static_cast<int>(C);
  p.eps = static_cast<float>(eps);
  p.x_dtype = fused_dtype(x.scalar_type());
  // One allocation for h either way (an allocation is host time on every call).
  Tensor h = residual_in ? at::empty_like(x) : at::empty({0}, x.options()), residual;
  if (residual_in) {
    residual = residual_in->contiguous();
    p.residual = residual.data_ptr();
    p.residual_dtype = fused_dtype(residual.scalar_type());
    p.h_out = h.data_ptr();
  }
  auto y = at::empty(x.sizes(), x.options().dtype(y_dtype));
  auto rstd = at::empty(lead, x.options().dtype(at::kFloat));
  p.y_dtype = fused_dtype(y_dtype);
  p.rstd_out = rstd.data_ptr<float>();
  auto stream = at::cuda::getCurrentCUDAStream().stream();
  if (y_amax && y_amax->delayed() && y_dtype == at::kBFloat16 && rows % 16 == 0 && C % 16 == 0) {
    // Delayed scaling: the GEMM reads only y's FP8 form (row-major from the kernel, the transpose from
    // its bytes); y is handed on unwritten (Fp8Amax::record_quantized). The backward reads h, not y.
    Fp8Tensor q = fp8_delayed_outputs(y_amax, y, p.y_fp8);
    p.y_fp8.data_t = nullptr;  // the kernel walks rows: the transpose is its own pass below
    kernels::run_rms_norm_fwd(p, stream);
    kernels::run_fp8_transpose(q.data.data_ptr(), q.data_t.data_ptr(), rows, C, stream);
    y_amax->record_quantized(y, std::move(q));
  } else {
    p.y_out = y.data_ptr();
    auto y_amax_bits = fp8_amax_bits_for(y_amax, y, p.y_amax);
    kernels::run_rms_norm_fwd(p, stream);
    if (y_amax) y_amax->record(y, y_amax_bits);
  }
  return {h, y, rstd};
#else
  TORCH_CHECK(false, "unreachable");
#endif
}

std::tuple<Tensor, Tensor, Tensor> rms_norm_backward(const Tensor& dy_in, const std::optional<Tensor>& dh_in,
                                                     const Tensor& h_in, const Tensor& weight_in, const Tensor& rstd,
                                                     std::optional<c10::ScalarType> residual_dtype,
                                                     const Fp8AmaxSlot& dresidual_amax) {
  TORCH_CHECK(dy_in.sizes() == h_in.sizes() && (!dh_in || dh_in->sizes() == h_in.sizes()),
              "rms_norm_backward: dy ", dy_in.sizes(), " and dh must have h's shape ", h_in.sizes());
  const Tensor none;
  check_one_device("rms_norm_backward", {{"h", &h_in}, {"dy", &dy_in}, {"dh", dh_in ? &*dh_in : &none},
                                         {"weight", &weight_in}, {"rstd", &rstd}});
  // The residual's dtype, h's when it has none; `separate`: its gradient is a tensor of its own. (Plain
  // values from here on: GCC's -Wmaybe-uninitialized misreads the optional once the kernel path is inlined.)
  const c10::ScalarType res_dtype = residual_dtype.has_value() ? residual_dtype.value() : h_in.scalar_type();
  const bool separate = res_dtype != h_in.scalar_type();
#ifdef LMSCALE_HAS_KERNELS
  const bool kernel = rms_norm_uses_kernel(h_in, std::nullopt, weight_in, dy_in.scalar_type()) &&
                      rstd.scalar_type() == at::kFloat && (!dh_in || dh_in->scalar_type() == h_in.scalar_type());
  if (kernel) {
    c10::cuda::CUDAGuard guard(h_in.device());
    auto h = h_in.contiguous(), dy = dy_in.contiguous(), weight = weight_in.contiguous(), rs = rstd.contiguous();
    Tensor dh = dh_in ? dh_in->contiguous() : Tensor();
    const int64_t C = h.size(-1), rows = h.numel() / C;
    auto dx = at::empty_like(h);
    const bool dres_by_kernel = separate && fused_kernel_dtype(res_dtype);  // fp16: cast after
    auto dres = at::empty(dres_by_kernel ? h.sizes() : at::IntArrayRef{0}, h.options().dtype(res_dtype));
    auto partial = at::empty({kernels::rms_norm_bwd_partial_rows(rows), C}, h.options().dtype(at::kFloat));
    auto dweight = at::empty({C}, h.options().dtype(at::kFloat));
    kernels::AddRmsNormBwdParams p;
    p.h = h.data_ptr();
    p.dy = dy.data_ptr();
    p.dh_in = dh.defined() ? dh.data_ptr() : nullptr;
    p.gain = weight.data_ptr<float>();
    p.rstd = rs.data_ptr<float>();
    p.dx_out = dx.data_ptr();
    p.dresidual_out = dres_by_kernel ? dres.data_ptr() : nullptr;
    p.dgain_partial = partial.data_ptr<float>();
    p.dgain_out = dweight.data_ptr<float>();
    p.rows = rows;
    p.cols = static_cast<int>(C);
    p.h_dtype = fused_dtype(h.scalar_type());
    p.residual_dtype = fused_dtype(dres_by_kernel ? res_dtype : h.scalar_type());
    p.y_dtype = fused_dtype(dy.scalar_type());
    // The kernel takes the amax of what it stores as the residual's gradient: dres, or dx without one.
    const bool amax_by_kernel = dresidual_amax && (dres_by_kernel || !separate);
    auto amax_bits = fp8_amax_bits_for(amax_by_kernel ? dresidual_amax : Fp8AmaxSlot(), dres_by_kernel ? dres : dx,
                                       p.dresidual_amax);
    kernels::run_rms_norm_bwd(p, at::cuda::getCurrentCUDAStream().stream());
    if (separate && !dres_by_kernel) dres = dx.to(res_dtype);
    if (amax_by_kernel) dresidual_amax->record(dres_by_kernel ? dres : dx, amax_bits);
    else if (dresidual_amax) dresidual_amax->record(dres, fp8_amax(dres));
    return {dx, dweight, dres};
  }
#endif
  const auto mt = fused_math_dtype(h_in.scalar_type());
  auto h = h_in.to(mt), dy = dy_in.to(mt), r = rstd.to(mt).unsqueeze(-1);
  auto u = dy * weight_in.to(mt);
  auto dh = r * u - h * r.pow(3) * (u * h).mean(-1, /*keepdim=*/true);
  if (dh_in) dh = dh + dh_in->to(mt);
  auto dweight = (dy * h * r).reshape({-1, h.size(-1)}).sum(0);
  auto dx = dh.to(h_in.scalar_type()).contiguous();
  auto dres = separate ? dx.to(res_dtype) : at::empty({0}, h_in.options());
  if (dresidual_amax) dresidual_amax->record(separate ? dres : dx, fp8_amax(separate ? dres : dx));
  return {dx, dweight.to(weight_in.scalar_type()), dres};
}

std::pair<Tensor, Tensor> rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps,
                                   c10::ScalarType y_dtype, const Fp8AmaxSlot& y_amax,
                                   const Fp8AmaxSlot& dresidual_amax) {
  const bool has_residual = residual.defined();
  auto out = RmsNormFunction::apply(x, has_residual ? residual : x, weight, has_residual, eps,
                                    static_cast<int64_t>(y_dtype), y_amax, dresidual_amax);
  if (!has_residual) return {x, out[0]};
  return {out[0], out[1]};
}

}  // namespace lmscale::ops
