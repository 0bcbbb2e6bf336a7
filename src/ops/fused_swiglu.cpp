// The one bridge to the fused SwiGLU gate kernels; see fused_swiglu.h.
#include "ops/fused_swiglu.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "ops/fused_checks.h"

#ifdef LMSCALE_HAS_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/fused_swiglu_params.h"
#include "ops/fp8_history.h"
#endif

namespace lmscale::ops {
namespace {

void check_swiglu(const at::Tensor& a, const at::Tensor& b) {
  check_one_device("swiglu", {{"a", &a}, {"b", &b}});
  check_floating("swiglu", "a", a);
  TORCH_CHECK(a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type(), "swiglu: a ", a.sizes(),
              " ", a.scalar_type(), " and b ", b.sizes(), " ", b.scalar_type(), " must have one shape and dtype");
}

#ifdef LMSCALE_HAS_KERNELS
// The elements between rows when t is rows of its last dim evenly spaced in memory (last dim
// contiguous), -1 otherwise. A column block of a wider GEMM output qualifies.
int64_t row_stride(const at::Tensor& t) {
  if (t.stride(-1) != 1 && t.size(-1) > 1) return -1;
  if (t.dim() == 1) return t.size(0);
  for (int64_t d = 0; d + 2 < t.dim(); ++d)
    if (t.size(d) > 1 && t.stride(d) != t.stride(d + 1) * t.size(d + 1)) return -1;
  return t.stride(-2);
}

// t itself when the kernels can read it in place (row_stride), else a contiguous copy.
at::Tensor kernel_layout(const at::Tensor& t) { return row_stride(t) >= 0 ? t : t.contiguous(); }

kernels::SwiGluParams params_for(const at::Tensor& a, const at::Tensor& b) {
  kernels::SwiGluParams p;
  p.a = a.data_ptr();
  p.b = b.data_ptr();
  p.a_stride = row_stride(a);
  p.b_stride = row_stride(b);
  p.cols = a.size(-1);
  p.rows = p.cols ? a.numel() / p.cols : 0;
  p.dtype = fused_dtype(a.scalar_type());
  return p;
}

#endif

struct SwiGluFunction : torch::autograd::Function<SwiGluFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b,
                            const Fp8AmaxSlot& out_amax, const Fp8AmaxSlot& da_amax, const Fp8AmaxSlot& db_amax) {
    ctx->save_for_backward({a, b});
    save_fp8_amax_slot(ctx, "da_amax", da_amax);
    save_fp8_amax_slot(ctx, "db_amax", db_amax);
    return swiglu_forward(a, b, out_amax);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    auto saved = ctx->get_saved_variables();
    auto [da, db] = swiglu_backward(g[0], saved[0], saved[1], saved_fp8_amax_slot(ctx, "da_amax"),
                                    saved_fp8_amax_slot(ctx, "db_amax"));
    return {da, db, {}, {}, {}};
  }
};

}  // namespace

bool swiglu_uses_kernel(const at::Tensor& a, const at::Tensor& b) {
#ifdef LMSCALE_HAS_KERNELS
  return a.is_cuda() && b.device() == a.device() && a.scalar_type() == b.scalar_type() &&
         fused_kernel_dtype(a.scalar_type()) && a.sizes() == b.sizes() && a.dim() >= 1 && a.numel() > 0;
#else
  (void)a, (void)b;
  return false;
#endif
}

at::Tensor swiglu_forward(const at::Tensor& a_in, const at::Tensor& b_in, const Fp8AmaxSlot& out_amax) {
  check_swiglu(a_in, b_in);
  if (!swiglu_uses_kernel(a_in, b_in)) {
    // Delayed scaling without the kernels: the dynamic path, whose recorded amax still feeds the history.
    const auto mt = fused_math_dtype(a_in.scalar_type());
    auto out = (at::silu(a_in.to(mt)) * b_in.to(mt)).to(a_in.scalar_type()).contiguous();
    if (out_amax) out_amax->record(out, fp8_amax(out));
    return out;
  }
#ifdef LMSCALE_HAS_KERNELS
  c10::cuda::CUDAGuard guard(a_in.device());
  const auto a = kernel_layout(a_in), b = kernel_layout(b_in);
  auto out = at::empty(a.sizes(), a.options().memory_format(at::MemoryFormat::Contiguous));
  auto p = params_for(a, b);
  auto stream = at::cuda::getCurrentCUDAStream().stream();
  std::optional<Fp8Tensor> q;
  if (out_amax && out_amax->delayed()) {
    q = fp8_delayed_outputs(out_amax, out, p.out_fp8);
    if (!kernels::swiglu_fp8_ok(p, /*backward=*/false)) q.reset();
  }
  if (q) {
    // W2 reads only the FP8 form: `out` is handed on unwritten (Fp8Amax::record_quantized).
    kernels::run_swiglu_fwd_fp8(p, stream);
    out_amax->record_quantized(out, *q);
  } else {
    p.out_fp8 = {};
    p.out = out.data_ptr();
    auto out_amax_bits = fp8_amax_bits_for(out_amax, out, p.out_amax);
    kernels::run_swiglu_fwd(p, stream);
    if (out_amax) out_amax->record(out, out_amax_bits);
  }
  return out;
#else
  TORCH_CHECK(false, "unreachable");
#endif
}

std::tuple<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& dout_in, const at::Tensor& a_in,
                                                   const at::Tensor& b_in, const Fp8AmaxSlot& da_amax,
                                                   const Fp8AmaxSlot& db_amax) {
  check_swiglu(a_in, b_in);
  TORCH_CHECK(dout_in.sizes() == a_in.sizes(), "swiglu_backward: dout ", dout_in.sizes(), " must have a's shape ",
              a_in.sizes());
  check_one_device("swiglu_backward", {{"a", &a_in}, {"dout", &dout_in}});
  if (swiglu_uses_kernel(a_in, b_in) && dout_in.scalar_type() == a_in.scalar_type()) {
#ifdef LMSCALE_HAS_KERNELS
    c10::cuda::CUDAGuard guard(a_in.device());
    const auto a = kernel_layout(a_in), b = kernel_layout(b_in);
    auto dout = dout_in.contiguous();
    auto opts = a.options().memory_format(at::MemoryFormat::Contiguous);
    auto da = at::empty(a.sizes(), opts), db = at::empty(a.sizes(), opts);
    auto p = params_for(a, b);
    p.dout = dout.data_ptr();
    p.da = da.data_ptr();
    p.db = db.data_ptr();
    p.da_stride = p.db_stride = p.cols;
    auto stream = at::cuda::getCurrentCUDAStream().stream();
    if (da_amax && db_amax && da_amax->delayed() && db_amax->delayed()) {
      auto fp = p;
      fp.da = fp.db = nullptr;  // W1 and W3 read only the FP8 forms: da and db are handed on unwritten
      auto qa = fp8_delayed_outputs(da_amax, da, fp.da_fp8), qb = fp8_delayed_outputs(db_amax, db, fp.db_fp8);
      if (kernels::swiglu_fp8_ok(fp, /*backward=*/true)) {
        kernels::run_swiglu_bwd_fp8(fp, stream);
        da_amax->record_quantized(da, std::move(qa));
        db_amax->record_quantized(db, std::move(qb));
        return {da, db};
      }
    }
    auto da_amax_bits = fp8_amax_bits_for(da_amax, da, p.da_amax), db_amax_bits = fp8_amax_bits_for(db_amax, db, p.db_amax);
    kernels::run_swiglu_bwd(p, stream);
    if (da_amax) da_amax->record(da, da_amax_bits);
    if (db_amax) db_amax->record(db, db_amax_bits);
    return {da, db};
#endif
  }
  const auto mt = fused_math_dtype(a_in.scalar_type());
  auto a = a_in.to(mt), b = b_in.to(mt), dout = dout_in.to(mt);
  auto sig = at::sigmoid(a);
  auto da = (dout * b * sig * (1 + a * (1 - sig))).to(a_in.scalar_type()).contiguous();
  auto db = (dout * a * sig).to(a_in.scalar_type()).contiguous();
  if (da_amax) da_amax->record(da, fp8_amax(da));
  if (db_amax) db_amax->record(db, fp8_amax(db));
  return {da, db};
}

at::Tensor swiglu(const at::Tensor& a, const at::Tensor& b, const Fp8AmaxSlot& out_amax, const Fp8AmaxSlot& da_amax,
                  const Fp8AmaxSlot& db_amax) {
  return SwiGluFunction::apply(a, b, out_amax, da_amax, db_amax);
}

}  // namespace lmscale::ops
