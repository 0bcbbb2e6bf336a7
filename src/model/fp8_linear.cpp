// The FP8 Linear; see fp8_linear.h.
#include "model/fp8_linear.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include "ops/fp8_gemm.h"
#include "ops/fp8_quantize.h"

namespace lmscale {
namespace {

constexpr auto kForward = at::kFloat8_e4m3fn;   // X and W
constexpr auto kGradient = at::kFloat8_e5m2;    // dY

struct LinearFp8 : torch::autograd::Function<LinearFp8> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& source,
                            at::TensorList weights, const ops::Fp8Tensor* cached, const ops::Fp8Tensor* quantized_x,
                            const ops::Fp8AmaxSlot& dy_amax) {
    const int64_t N = source.size(0);
    const bool grad = ctx != nullptr;
    // Row-major X for Y; Xᵀ (its column-major view) for dW. Row-major W is Wᵀ column-major for Y;
    // Wᵀ row-major is W column-major for dX.
    auto qx = quantized_x ? *quantized_x : quantize(x, grad, {});
    auto qw = cached ? *cached : ops::fp8_quantize(source.detach(), kForward, /*row_major=*/true, /*transposed=*/grad);
    auto y = ops::fp8_mm(qx.data, qw.data.t(), qx.inv_scale, qw.inv_scale, at::kBFloat16, /*fast_accum=*/true);
    if (grad) {
      ctx->save_for_backward({qx.data_t, qx.inv_scale, qw.data_t, qw.inv_scale});
      ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
      ctx->saved_data["x_sizes"] = x.sizes().vec();
      std::vector<int64_t> rows;  // the weights' row blocks, which need not be equal
      for (const auto& w : weights) rows.push_back(w.size(0));
      ctx->saved_data["block_rows"] = rows;
      ops::save_fp8_amax_slot(ctx, "dy_amax", dy_amax);
    }
    auto out_sizes = x.sizes().vec();
    out_sizes.back() = N;
    return y.view(out_sizes);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    const auto saved = ctx->get_saved_variables();
    const auto &x_t = saved[0], &inv_x = saved[1], &w_t = saved[2], &inv_w = saved[3];
    const int64_t N = w_t.size(1);  // w_t is Wᵀ: (K, N)
    auto qg = cast(g[0].to(at::kBFloat16).reshape({-1, N}), kGradient, /*transposed=*/true,
                   ops::saved_fp8_amax_slot(ctx, "dy_amax"));
    torch::autograd::tensor_list grads;
    if (ctx->needs_input_grad(0)) {
      const auto x_dtype = static_cast<c10::ScalarType>(ctx->saved_data["x_dtype"].toInt());
      auto dx = ops::fp8_mm(qg.data, w_t.t(), qg.inv_scale, inv_w, at::kBFloat16, /*fast_accum=*/false);
      grads.push_back(dx.view(ctx->saved_data["x_sizes"].toIntVector()).to(x_dtype));
    } else {
      grads.emplace_back();
    }
    grads.emplace_back();  // the source: a copy (or an alias) of the weights, which get the gradient
    auto dw = ops::fp8_mm(qg.data_t, x_t.t(), qg.inv_scale, inv_x, at::kFloat, /*fast_accum=*/false);
    for (auto& part : dw.split_with_sizes(ctx->saved_data["block_rows"].toIntVector(), 0)) grads.push_back(part);
    grads.emplace_back();  // `cached`
    grads.emplace_back();  // `quantized_x`
    grads.emplace_back();  // `dy_amax`
    return grads;
  }

  // X (..., K) as rows of K, e4m3, with Xᵀ when the backward will need it.
  static ops::Fp8Tensor quantize(const at::Tensor& x, bool transposed, const ops::Fp8AmaxSlot& x_amax) {
    return cast(x.to(at::kBFloat16).reshape({-1, x.size(-1)}), kForward, transposed, x_amax);
  }

  // x2 (rows, cols) row-major, and transposed if asked, with the amax its producer recorded in `slot`
  // when that is x2's (the cast alone), or with an amax pass of its own.
  // Under delayed scaling the producer may have written x2 in FP8 itself (Fp8Amax::record_quantized):
  // that form is used as it is, and x2's memory, never written, is not read.
  static ops::Fp8Tensor cast(const at::Tensor& x2, at::ScalarType fp8, bool transposed, const ops::Fp8AmaxSlot& slot) {
    if (slot) {
      if (auto q = slot->take_quantized(x2)) {
        TORCH_INTERNAL_ASSERT(q->data.scalar_type() == fp8 && (!transposed || q->data_t.defined()),
                              "the producer's FP8 form has format ", q->data.scalar_type(), ", the GEMM takes ", fp8);
        return *q;
      }
    }
    const auto bits = slot ? slot->bits_for(x2) : at::Tensor();
    if (bits.defined()) return ops::fp8_quantize(x2, fp8, /*row_major=*/true, transposed, bits);
    return ops::fp8_quantize(x2, fp8, /*row_major=*/true, transposed);
  }
};

}  // namespace

at::Tensor linear_fp8(const at::Tensor& x, const at::Tensor& source, at::TensorList weights,
                      const ops::Fp8Tensor* cached, const ops::Fp8Tensor* quantized_x, const ops::Fp8AmaxSlot& dy_amax) {
  TORCH_CHECK(x.size(-1) == source.size(1), "linear_fp8: x has ", x.size(-1), " features but the weight takes ",
              source.size(1));
  TORCH_CHECK(!weights.empty(), "linear_fp8: no weights to give the gradient to");
  if (cached)
    TORCH_CHECK(cached->data.defined() && cached->data_t.defined() && cached->data.sizes() == source.sizes(),
                "linear_fp8: the cached FP8 weight does not match the source ", source.sizes());
  const bool grad = torch::GradMode::is_enabled();
  if (quantized_x)
    TORCH_CHECK(quantized_x->data.defined() && quantized_x->data.size(-1) == x.size(-1) &&
                    quantized_x->data.numel() == x.numel() && (!grad || quantized_x->data_t.defined()),
                "linear_fp8: the quantized input does not match x ", x.sizes(),
                grad ? " (with gradients on it needs its transposed copy: quantize_fp8_input)" : "");
  if (!grad) return LinearFp8::forward(nullptr, x, source, weights, cached, quantized_x, dy_amax);
  return LinearFp8::apply(x, source, weights, cached, quantized_x, dy_amax);
}

ops::Fp8Tensor quantize_fp8_input(const at::Tensor& x, const ops::Fp8AmaxSlot& x_amax) {
  return LinearFp8::quantize(x, /*transposed=*/torch::GradMode::is_enabled(), x_amax);
}

bool fp8_linear_ok(const at::Tensor& x, int64_t out_features) {
  const int64_t K = x.size(-1), M = K ? x.numel() / K : 0;
  return M > 0 && ops::fp8_shapes_ok(M, K, out_features);
}

}  // namespace lmscale
