// The one bridge to the fused QKV-split + RoPE kernels; see fused_rope.h.
#include "ops/fused_rope.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <array>
#include <utility>

#include "ops/fused_checks.h"

#ifdef LMSCALE_HAS_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/fused_rope_params.h"
#include "ops/fp8_history.h"
#endif

namespace lmscale::ops {
namespace {

using at::Tensor;

void check_rope(const char* op, const char* name, const Tensor& t, const Tensor& rotation) {
  check_one_device(op, {{name, &t}, {"rotation", &rotation}});
  check_floating(op, name, t);
  check_floating(op, "rotation", rotation);
}

void check_rope_qkv_shapes(const Tensor& qkv, const Tensor& rotation, int64_t heads) {
  TORCH_CHECK(qkv.dim() == 3 && qkv.size(2) % 3 == 0, "rope_qkv: qkv must be (B, T, 3C), got ", qkv.sizes());
  const int64_t C = qkv.size(2) / 3;
  TORCH_CHECK(heads > 0 && C % heads == 0 && (C / heads) % 2 == 0, "rope_qkv: C = ", C, " must split into ", heads,
              " heads of an even head dim");
  TORCH_CHECK(rotation.dim() == 3 && rotation.size(0) >= qkv.size(1) && rotation.size(1) == C / heads / 2 &&
                  rotation.size(2) == 2,
              "rope_qkv: rotation table ", rotation.sizes(), " does not cover T = ", qkv.size(1), ", D = ",
              C / heads, " (need (>=T, D/2, 2))");
}

// (cos, sin) of the first T positions in the math dtype, each (T, D/2).
std::pair<Tensor, Tensor> rope_table(const Tensor& rotation, int64_t T, at::ScalarType mt) {
  auto table = rotation.slice(0, 0, T).to(mt);
  return {table.select(-1, 0), table.select(-1, 1)};
}

#ifdef LMSCALE_HAS_KERNELS
kernels::RopeQkvParams params_for(int64_t B, int64_t T, int64_t heads, int64_t D, const Tensor& rotation,
                                  at::ScalarType dtype) {
  kernels::RopeQkvParams p;
  p.batch = static_cast<int>(B);
  p.seqlen = static_cast<int>(T);
  p.heads = static_cast<int>(heads);
  p.head_dim = static_cast<int>(D);
  p.rotation = rotation.data_ptr<float>();
  p.dtype = dtype == at::kBFloat16 ? kernels::RopeDtype::kBF16 : kernels::RopeDtype::kFP32;
  return p;
}
#endif

struct RopeQkvFunction : torch::autograd::Function<RopeQkvFunction> {
  static torch::autograd::tensor_list forward(torch::autograd::AutogradContext* ctx, const Tensor& qkv,
                                              const Tensor& rotation, int64_t heads, const Fp8AmaxSlot& dqkv_amax) {
    auto [q, k, v] = rope_qkv_forward(qkv, rotation, heads);
    ctx->save_for_backward({rotation});
    ctx->saved_data["heads"] = heads;
    save_fp8_amax_slot(ctx, "dqkv_amax", dqkv_amax);
    return {q, k, v};
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    // Some output may not reach the loss: its gradient is zero.
    const Tensor* defined = nullptr;
    for (const auto& t : g)
      if (t.defined()) defined = &t;
    TORCH_INTERNAL_ASSERT(defined != nullptr);
    std::array<Tensor, 3> d;
    for (int i = 0; i < 3; ++i) d[i] = g[i].defined() ? g[i] : at::zeros_like(*defined);
    auto dqkv = rope_qkv_backward(d[0], d[1], d[2], ctx->get_saved_variables()[0], ctx->saved_data["heads"].toInt(),
                                  /*rotate_half=*/false, saved_fp8_amax_slot(ctx, "dqkv_amax"));
    return {dqkv, Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace

bool rope_qkv_uses_kernel(const Tensor& qkv, const Tensor& rotation) {
#ifdef LMSCALE_HAS_KERNELS
  return qkv.is_cuda() && fused_kernel_dtype(qkv.scalar_type()) && qkv.numel() > 0 &&
         rotation.device() == qkv.device() && rotation.scalar_type() == at::kFloat;
#else
  (void)qkv, (void)rotation;
  return false;
#endif
}

std::tuple<Tensor, Tensor, Tensor> rope_qkv_forward(const Tensor& qkv_in, const Tensor& rotation_in, int64_t heads,
                                                     bool rotate_half) {
  check_rope("rope_qkv_forward", "qkv", qkv_in, rotation_in);
  check_rope_qkv_shapes(qkv_in, rotation_in, heads);
  const int64_t B = qkv_in.size(0), T = qkv_in.size(1), C = qkv_in.size(2) / 3, D = C / heads;
  if (rotate_half || !rope_qkv_uses_kernel(qkv_in, rotation_in)) {
    const auto mt = fused_math_dtype(qkv_in.scalar_type());
    auto parts = qkv_in.reshape({B, T, 3, heads, D}).permute({2, 0, 3, 1, 4});  // (3, B, H, T, D)
    auto [cos, sin] = rope_table(rotation_in, T, mt);
    auto rotate = [&](const Tensor& x) {
      if (rotate_half) {
        auto xm = x.to(mt);
        auto x0 = xm.narrow(-1, 0, D / 2), x1 = xm.narrow(-1, D / 2, D / 2);
        return at::cat({x0 * cos - x1 * sin, x0 * sin + x1 * cos}, -1).to(qkv_in.scalar_type());
      }
      auto pairs = x.to(mt).unflatten(-1, {D / 2, 2});
      auto x0 = pairs.select(-1, 0), x1 = pairs.select(-1, 1);
      return at::stack({x0 * cos - x1 * sin, x0 * sin + x1 * cos}, -1).flatten(-2).to(qkv_in.scalar_type());
    };
    // v is copied even where its view happens to be contiguous: an op's output must not alias its input.
    return {rotate(parts[0]).contiguous(), rotate(parts[1]).contiguous(), parts[2].clone(at::MemoryFormat::Contiguous)};
  }
#ifdef LMSCALE_HAS_KERNELS
  c10::cuda::CUDAGuard guard(qkv_in.device());
  // Rows of the (B·T, 3C) matrix must be dense; a GEMM output always is, and is read in place.
  auto qkv = qkv_in.stride(2) == 1 && qkv_in.stride(0) == qkv_in.size(1) * qkv_in.stride(1) ? qkv_in
                                                                                            : qkv_in.contiguous();
  auto rotation = rotation_in.contiguous();
  auto q = at::empty({B, heads, T, D}, qkv.options()), k = at::empty_like(q), v = at::empty_like(q);
  auto p = params_for(B, T, heads, D, rotation, qkv.scalar_type());
  p.qkv_in = qkv.data_ptr();
  p.qkv_row_stride = qkv.stride(1);
  p.q_out = q.data_ptr();
  p.k_out = k.data_ptr();
  p.v_out = v.data_ptr();
  kernels::run_rope_qkv_fwd(p, at::cuda::getCurrentCUDAStream().stream());
  return {q, k, v};
#else
  TORCH_CHECK(false, "unreachable");
#endif
}

Tensor rope_qkv_backward(const Tensor& dq_in, const Tensor& dk_in, const Tensor& dv_in, const Tensor& rotation_in,
                         int64_t heads, bool rotate_half, const Fp8AmaxSlot& dqkv_amax) {
  TORCH_CHECK(dq_in.dim() == 4 && dk_in.sizes() == dq_in.sizes() && dv_in.sizes() == dq_in.sizes() &&
                  dq_in.size(1) == heads,
              "rope_qkv_backward: dq, dk, dv must be one (B, H, T, D) shape with H = ", heads, "; got ", dq_in.sizes(),
              ", ", dk_in.sizes(), ", ", dv_in.sizes());
  check_rope("rope_qkv_backward", "dq", dq_in, rotation_in);
  check_one_device("rope_qkv_backward", {{"dq", &dq_in}, {"dk", &dk_in}, {"dv", &dv_in}});
  const int64_t B = dq_in.size(0), T = dq_in.size(2), D = dq_in.size(3), C = heads * D;
  const auto dt = dq_in.scalar_type();
  if (!rotate_half && rope_qkv_uses_kernel(dq_in, rotation_in) && dk_in.scalar_type() == dt &&
      dv_in.scalar_type() == dt) {
#ifdef LMSCALE_HAS_KERNELS
    c10::cuda::CUDAGuard guard(dq_in.device());
    auto dq = dq_in.contiguous(), dk = dk_in.contiguous(), dv = dv_in.contiguous();
    auto rotation = rotation_in.contiguous();
    auto dqkv = at::empty({B, T, 3 * C}, dq.options());
    auto p = params_for(B, T, heads, D, rotation, dt);
    p.q = dq.data_ptr();
    p.k = dk.data_ptr();
    p.v = dv.data_ptr();
    p.qkv_grad = dqkv.data_ptr();
    auto stream = at::cuda::getCurrentCUDAStream().stream();
    if (dqkv_amax && dqkv_amax->delayed()) {
      // The QKV GEMM reads only the FP8 form: dqkv is handed on unwritten (Fp8Amax::record_quantized).
      auto fp = p;
      fp.qkv_grad = nullptr;
      Fp8Tensor q = fp8_delayed_outputs(dqkv_amax, dqkv, fp.qkv_grad_fp8);
      if (kernels::rope_qkv_fp8_ok(fp)) {
        kernels::run_rope_qkv_bwd_fp8(fp, stream);
        dqkv_amax->record_quantized(dqkv, std::move(q));
        return dqkv;
      }
    }
    auto dqkv_amax_bits = fp8_amax_bits_for(dqkv_amax, dqkv, p.qkv_grad_amax);
    kernels::run_rope_qkv_bwd(p, stream);
    if (dqkv_amax) dqkv_amax->record(dqkv, dqkv_amax_bits);
    return dqkv;
#endif
  }
  const auto mt = fused_math_dtype(dt);
  auto [cos, sin] = rope_table(rotation_in, T, mt);
  auto unrotate = [&](const Tensor& y) {
    if (rotate_half) {
      auto ym = y.to(mt);
      auto y0 = ym.narrow(-1, 0, D / 2), y1 = ym.narrow(-1, D / 2, D / 2);
      return at::cat({y0 * cos + y1 * sin, y1 * cos - y0 * sin}, -1).to(dt);
    }
    auto pairs = y.to(mt).unflatten(-1, {D / 2, 2});
    auto y0 = pairs.select(-1, 0), y1 = pairs.select(-1, 1);
    return at::stack({y0 * cos + y1 * sin, y1 * cos - y0 * sin}, -1).flatten(-2).to(dt);
  };
  auto parts = at::stack({unrotate(dq_in), unrotate(dk_in), dv_in.to(dt)}, 0);  // (3, B, H, T, D)
  auto dqkv = parts.permute({1, 3, 0, 2, 4}).reshape({B, T, 3 * C});
  if (dqkv_amax) dqkv_amax->record(dqkv, fp8_amax(dqkv));
  return dqkv;
}

std::tuple<Tensor, Tensor, Tensor> rope_qkv(const Tensor& qkv, const Tensor& rotation, int64_t heads,
                                            const Fp8AmaxSlot& dqkv_amax) {
  auto out = RopeQkvFunction::apply(qkv, rotation, heads, dqkv_amax);
  return {out[0], out[1], out[2]};
}

}  // namespace lmscale::ops
