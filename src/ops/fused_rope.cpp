// Bridge to the fused QKV-split + RoPE kernels; see fused_rope.h.
#include "ops/fused_rope.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <array>

#ifdef LMSCALE_HAS_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/fused_rope_params.h"
#include "ops/fp8_history.h"
#endif

namespace lmscale::ops {

void check_rope_qkv_shapes(const at::Tensor& qkv, const at::Tensor& rotation, int64_t heads) {
  TORCH_CHECK(qkv.dim() == 3 && qkv.size(2) % 3 == 0, "rope_qkv: qkv must be (B, T, 3C), got ", qkv.sizes());
  const int64_t C = qkv.size(2) / 3;
  TORCH_CHECK(heads > 0 && C % heads == 0 && (C / heads) % 2 == 0, "rope_qkv: C = ", C, " must split into ", heads,
              " heads of an even head dim");
  TORCH_CHECK(rotation.dim() == 3 && rotation.size(0) >= qkv.size(1) && rotation.size(1) == C / heads / 2 &&
                  rotation.size(2) == 2,
              "rope_qkv: rotation table ", rotation.sizes(), " does not cover T = ", qkv.size(1), ", D = ",
              C / heads, " (need (>=T, D/2, 2))");
}

namespace {

#ifdef LMSCALE_HAS_KERNELS
kernels::RopeQkvParams params_for(const at::Tensor& qkv_like, const at::Tensor& rotation, int64_t heads) {
  kernels::RopeQkvParams p;
  p.batch = static_cast<int>(qkv_like.size(0));
  p.seqlen = static_cast<int>(qkv_like.size(1));
  p.heads = static_cast<int>(heads);
  p.head_dim = static_cast<int>(qkv_like.size(2) / 3 / heads);
  p.rotation = rotation.data_ptr<float>();
  p.dtype = qkv_like.scalar_type() == at::kBFloat16 ? kernels::RopeDtype::kBF16 : kernels::RopeDtype::kFP32;
  return p;
}

struct RopeQkvKernel : torch::autograd::Function<RopeQkvKernel> {
  static torch::autograd::tensor_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& qkv_in,
                                              const at::Tensor& rotation, int64_t heads, const Fp8AmaxSlot& dqkv_amax) {
    c10::cuda::CUDAGuard guard(qkv_in.device());
    // Rows of the (B·T, 3C) matrix must be dense; a GEMM output always is.
    auto qkv = qkv_in.stride(2) == 1 && qkv_in.stride(0) == qkv_in.size(1) * qkv_in.stride(1) ? qkv_in
                                                                                              : qkv_in.contiguous();
    const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / heads;
    auto opts = qkv.options();
    auto q = at::empty({B, heads, T, D}, opts), k = at::empty_like(q), v = at::empty_like(q);
    auto p = params_for(qkv, rotation, heads);
    p.qkv_in = qkv.data_ptr();
    p.qkv_row_stride = qkv.stride(1);
    p.q_out = q.data_ptr();
    p.k_out = k.data_ptr();
    p.v_out = v.data_ptr();
    kernels::run_rope_qkv_fwd(p, at::cuda::getCurrentCUDAStream().stream());
    ctx->save_for_backward({rotation});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["shape"] = qkv.sizes().vec();
    save_fp8_amax_slot(ctx, "dqkv_amax", dqkv_amax);
    return {q, k, v};
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    auto rotation = ctx->get_saved_variables()[0];
    const int64_t heads = ctx->saved_data["heads"].toInt();
    const auto shape = ctx->saved_data["shape"].toIntVector();
    // Some output may not reach the loss: its gradient is zero.
    const at::Tensor* defined = nullptr;
    for (const auto& t : g)
      if (t.defined()) defined = &t;
    TORCH_INTERNAL_ASSERT(defined != nullptr);
    std::array<at::Tensor, 3> d;
    for (int i = 0; i < 3; ++i) d[i] = g[i].defined() ? g[i].contiguous() : at::zeros_like(*defined);
    c10::cuda::CUDAGuard guard(d[0].device());
    auto dqkv = at::empty(shape, d[0].options());
    auto p = params_for(dqkv, rotation, heads);
    p.q = d[0].data_ptr();
    p.k = d[1].data_ptr();
    p.v = d[2].data_ptr();
    p.qkv_grad = dqkv.data_ptr();
    const auto dqkv_amax = saved_fp8_amax_slot(ctx, "dqkv_amax");
    auto stream = at::cuda::getCurrentCUDAStream().stream();
    if (dqkv_amax && dqkv_amax->delayed()) {
      // The QKV GEMM reads only the FP8 form: dqkv is handed on unwritten (Fp8Amax::record_quantized).
      auto fp = p;
      fp.qkv_grad = nullptr;
      Fp8Tensor q = fp8_delayed_outputs(dqkv_amax, dqkv, fp.qkv_grad_fp8);
      if (kernels::rope_qkv_fp8_ok(fp)) {
        kernels::run_rope_qkv_bwd_fp8(fp, stream);
        dqkv_amax->record_quantized(dqkv, std::move(q));
        return {dqkv, at::Tensor(), at::Tensor(), at::Tensor()};
      }
    }
    at::Tensor dqkv_amax_bits = dqkv_amax ? empty_fp8_amax_bits(dqkv) : at::Tensor();
    if (dqkv_amax) p.qkv_grad_amax = reinterpret_cast<uint32_t*>(dqkv_amax_bits.data_ptr<int32_t>());
    kernels::run_rope_qkv_bwd(p, stream);
    if (dqkv_amax) dqkv_amax->record(dqkv, dqkv_amax_bits);
    return {dqkv, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};
#endif

}  // namespace

bool rope_qkv_uses_kernel(const at::Tensor& qkv) {
#ifdef LMSCALE_HAS_KERNELS
  return qkv.is_cuda() && (qkv.scalar_type() == at::kBFloat16 || qkv.scalar_type() == at::kFloat) &&
         qkv.dim() == 3 && qkv.stride(2) == 1;
#else
  (void)qkv;
  return false;
#endif
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> rope_qkv(const at::Tensor& qkv, const at::Tensor& rotation,
                                                        int64_t heads, const Fp8AmaxSlot& dqkv_amax) {
  check_rope_qkv_shapes(qkv, rotation, heads);
#ifdef LMSCALE_HAS_KERNELS
  if (rope_qkv_uses_kernel(qkv) && rotation.is_cuda() && rotation.scalar_type() == at::kFloat &&
      rotation.is_contiguous() && rotation.device() == qkv.device()) {
    auto out = RopeQkvKernel::apply(qkv, rotation, heads, dqkv_amax);
    return {out[0], out[1], out[2]};
  }
#endif
  // The amax contract with ATen ops: qkv's gradient as autograd hands it over.
  return rope_qkv_reference(record_grad_amax(qkv, dqkv_amax), rotation, heads);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> rope_qkv_reference(const at::Tensor& qkv, const at::Tensor& rotation,
                                                                  int64_t heads) {
  check_rope_qkv_shapes(qkv, rotation, heads);
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / heads;
  auto parts = qkv.reshape({B, T, 3, heads, D}).transpose(1, 3);  // (B, H, 3, T, D)
  const auto dt = at::promote_types(qkv.scalar_type(), at::kFloat);
  auto table = rotation.slice(0, 0, T).to(dt);
  auto cos = table.select(-1, 0), sin = table.select(-1, 1);  // (T, D/2)
  auto rotate = [&](const at::Tensor& x) {
    auto pairs = x.to(dt).unflatten(-1, {D / 2, 2});
    auto x0 = pairs.select(-1, 0), x1 = pairs.select(-1, 1);
    return at::stack({x0 * cos - x1 * sin, x0 * sin + x1 * cos}, -1).flatten(-2).to(qkv.scalar_type());
  };
  return {rotate(parts.select(2, 0)).contiguous(), rotate(parts.select(2, 1)).contiguous(),
          parts.select(2, 2).contiguous()};
}

}  // namespace lmscale::ops
