// Bridge to the fused SwiGLU gate kernels; see fused_swiglu.h.
#include "ops/fused_swiglu.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#ifdef LMSCALE_HAS_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/fused_swiglu_params.h"
#include "ops/fp8_history.h"
#endif

namespace lmscale::ops {
namespace {

void check_shapes(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.sizes() == b.sizes() && a.dim() >= 1, "silu_mul: a ", a.sizes(), " and b ", b.sizes(),
              " must have one shape");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "silu_mul: a is ", a.scalar_type(), " but b is ", b.scalar_type(),
              ": give both one dtype");
}

// The elements between rows when t is rows of its last dim evenly spaced in memory (last dim
// contiguous), -1 otherwise. A column block of a wider GEMM output qualifies.
int64_t row_stride(const at::Tensor& t) {
  if (t.stride(-1) != 1 && t.size(-1) > 1) return -1;
  if (t.dim() == 1) return t.size(0);
  for (int64_t d = 0; d + 2 < t.dim(); ++d)
    if (t.size(d) > 1 && t.stride(d) != t.stride(d + 1) * t.size(d + 1)) return -1;
  return t.stride(-2);
}

#ifdef LMSCALE_HAS_KERNELS
kernels::SwiGluParams params_for(const at::Tensor& a, const at::Tensor& b) {
  kernels::SwiGluParams p;
  p.a = a.data_ptr();
  p.b = b.data_ptr();
  p.a_stride = row_stride(a);
  p.b_stride = row_stride(b);
  p.cols = a.size(-1);
  p.rows = p.cols ? a.numel() / p.cols : 0;
  p.dtype = a.scalar_type() == at::kBFloat16 ? kernels::FusedDtype::kBF16 : kernels::FusedDtype::kFP32;
  return p;
}

// The bits a kernel writes t's amax into when `slot` asks for it (pointer set in `param`), else undefined.
at::Tensor amax_bits_for(const Fp8AmaxSlot& slot, const at::Tensor& t, uint32_t*& param) {
  if (!slot) return {};
  auto bits = empty_fp8_amax_bits(t);
  param = reinterpret_cast<uint32_t*>(bits.data_ptr<int32_t>());
  return bits;
}

struct SiluMulKernel : torch::autograd::Function<SiluMulKernel> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b,
                            const Fp8AmaxSlot& out_amax, const Fp8AmaxSlot& da_amax, const Fp8AmaxSlot& db_amax) {
    c10::cuda::CUDAGuard guard(a.device());
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
      auto out_amax_bits = amax_bits_for(out_amax, out, p.out_amax);
      kernels::run_swiglu_fwd(p, stream);
      if (out_amax) out_amax->record(out, out_amax_bits);
    }
    ctx->save_for_backward({a, b});
    save_fp8_amax_slot(ctx, "da_amax", da_amax);
    save_fp8_amax_slot(ctx, "db_amax", db_amax);
    return out;
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    auto saved = ctx->get_saved_variables();
    const auto &a = saved[0], &b = saved[1];
    c10::cuda::CUDAGuard guard(a.device());
    auto dout = g[0].contiguous();
    auto opts = a.options().memory_format(at::MemoryFormat::Contiguous);
    auto da = at::empty(a.sizes(), opts), db = at::empty(a.sizes(), opts);
    auto p = params_for(a, b);
    p.dout = dout.data_ptr();
    p.da = da.data_ptr();
    p.db = db.data_ptr();
    p.da_stride = p.db_stride = p.cols;
    const auto da_amax = saved_fp8_amax_slot(ctx, "da_amax"), db_amax = saved_fp8_amax_slot(ctx, "db_amax");
    auto stream = at::cuda::getCurrentCUDAStream().stream();
    if (da_amax && db_amax && da_amax->delayed() && db_amax->delayed()) {
      auto fp = p;
      fp.da = fp.db = nullptr;  // W1 and W3 read only the FP8 forms: da and db are handed on unwritten
      auto qa = fp8_delayed_outputs(da_amax, da, fp.da_fp8), qb = fp8_delayed_outputs(db_amax, db, fp.db_fp8);
      if (kernels::swiglu_fp8_ok(fp, /*backward=*/true)) {
        kernels::run_swiglu_bwd_fp8(fp, stream);
        da_amax->record_quantized(da, std::move(qa));
        db_amax->record_quantized(db, std::move(qb));
        return {da, db, {}, {}, {}};
      }
    }
    auto da_amax_bits = amax_bits_for(da_amax, da, p.da_amax), db_amax_bits = amax_bits_for(db_amax, db, p.db_amax);
    kernels::run_swiglu_bwd(p, stream);
    if (da_amax) da_amax->record(da, da_amax_bits);
    if (db_amax) db_amax->record(db, db_amax_bits);
    return {da, db, {}, {}, {}};
  }
};
#endif

}  // namespace

bool silu_mul_uses_kernel(const at::Tensor& a, const at::Tensor& b) {
#ifdef LMSCALE_HAS_KERNELS
  return a.is_cuda() && b.device() == a.device() && a.scalar_type() == b.scalar_type() &&
         (a.scalar_type() == at::kBFloat16 || a.scalar_type() == at::kFloat) && a.sizes() == b.sizes() &&
         a.dim() >= 1 && row_stride(a) >= 0 && row_stride(b) >= 0;
#else
  (void)a, (void)b;
  return false;
#endif
}

at::Tensor silu_mul(const at::Tensor& a, const at::Tensor& b, const Fp8AmaxSlot& out_amax, const Fp8AmaxSlot& da_amax,
                    const Fp8AmaxSlot& db_amax) {
  check_shapes(a, b);
#ifdef LMSCALE_HAS_KERNELS
  if (silu_mul_uses_kernel(a, b)) return SiluMulKernel::apply(a, b, out_amax, da_amax, db_amax);
#endif
  // The amax contract with ATen ops: the gradients as autograd hands them over, the result as returned.
  // Delayed scaling without the kernels: the dynamic path, whose recorded amax still feeds the history.
  auto out = silu_mul_reference(record_grad_amax(a, da_amax), record_grad_amax(b, db_amax)).contiguous();
  if (out_amax) out_amax->record(out, fp8_amax(out));
  return out;
}

at::Tensor silu_mul_reference(const at::Tensor& a, const at::Tensor& b) {
  check_shapes(a, b);
  return at::silu(a) * b;
}

}  // namespace lmscale::ops
