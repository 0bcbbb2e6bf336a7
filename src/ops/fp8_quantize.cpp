// FP8 per-tensor quantization; see fp8_quantize.h.
#include "ops/fp8_quantize.h"

#include <ATen/ATen.h>

#include <atomic>

#include "kernels/fp8_scale.h"

#ifdef LMSCALE_HAS_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/fp8_cast_params.h"
#endif

namespace lmscale::ops {
namespace {

std::atomic<int64_t> casts_with_own_amax{0};

kernels::Fp8Format format_of(at::ScalarType fp8) {
  TORCH_CHECK(fp8 == at::kFloat8_e4m3fn || fp8 == at::kFloat8_e5m2, "fp8_quantize: target dtype ", fp8,
              " is not an FP8 format: use Float8_e4m3fn (activations, weights) or Float8_e5m2 (gradients)");
  return fp8 == at::kFloat8_e4m3fn ? kernels::Fp8Format::kE4M3 : kernels::Fp8Format::kE5M2;
}

// The CPU path (and the reference the CUDA kernels are tested against): the same scale rule, then
// x·s in fp32 (exact: s is a power of two), clamped to the format's range (ATen's cast does not
// saturate; NaN passes the clamp as NaN) and rounded to nearest even by the cast.
at::Tensor cast_scaled(const at::Tensor& x, float s, at::ScalarType fp8) {
  const double m = kernels::fp8_max(format_of(fp8));
  return (x.to(at::kFloat) * s).clamp(-m, m).to(fp8);
}

Fp8Tensor quantize_aten(const at::Tensor& x, at::ScalarType fp8, bool row_major, bool transposed) {
  const float amax = x.numel() ? x.abs().amax().item<float>() : 0.f;  // amax propagates NaN
  const float s = kernels::fp8_scale_from_amax(amax, format_of(fp8));
  auto q = cast_scaled(x, s, fp8);
  Fp8Tensor out;
  if (row_major) out.data = q;
  if (transposed) out.data_t = q.t().contiguous();
  out.inv_scale = at::full({}, 1.f / s, x.options().dtype(at::kFloat));
  return out;
}

}  // namespace

float fp8_scale(float amax, at::ScalarType fp8) { return kernels::fp8_scale_from_amax(amax, format_of(fp8)); }

bool fp8_shapes_ok(int64_t m, int64_t k, int64_t n) { return m % 16 == 0 && k % 16 == 0 && n % 16 == 0; }

Fp8Tensor fp8_quantize(const at::Tensor& x_in, at::ScalarType fp8, bool row_major, bool transposed) {
  TORCH_CHECK(x_in.dim() == 2, "fp8_quantize: x must be 2-D (rows, cols), got ", x_in.sizes());
  TORCH_CHECK(x_in.scalar_type() == at::kBFloat16 || x_in.scalar_type() == at::kFloat,
              "fp8_quantize: x is ", x_in.scalar_type(), "; give bf16 or fp32");
  const auto f = format_of(fp8);
  ++casts_with_own_amax;
  if (!x_in.is_cuda()) return quantize_aten(x_in, fp8, row_major, transposed);
#ifdef LMSCALE_HAS_KERNELS
  TORCH_CHECK(x_in.size(0) % 16 == 0 && x_in.size(1) % 16 == 0, "fp8_quantize: x is ", x_in.sizes(),
              "; on CUDA rows and cols must be multiples of 16 (the FP8 GEMM's rule): keep such layers in bf16");
  c10::cuda::CUDAGuard guard(x_in.device());
  const auto x = x_in.contiguous();
  auto amax_bits = at::empty({1}, x.options().dtype(at::kInt));  // zeroed by run_fp8_amax
  auto fp8_opts = x.options().dtype(fp8);
  Fp8Tensor out;
  if (row_major) out.data = at::empty({x.size(0), x.size(1)}, fp8_opts);
  if (transposed) out.data_t = at::empty({x.size(1), x.size(0)}, fp8_opts);
  out.inv_scale = at::empty({}, x.options().dtype(at::kFloat));
  kernels::Fp8CastParams p;
  p.x = x.data_ptr();
  p.rows = x.size(0);
  p.cols = x.size(1);
  p.dtype = x.scalar_type() == at::kBFloat16 ? kernels::FusedDtype::kBF16 : kernels::FusedDtype::kFP32;
  p.format = f;
  p.amax_bits = reinterpret_cast<uint32_t*>(amax_bits.data_ptr<int32_t>());
  p.out = row_major ? out.data.data_ptr() : nullptr;
  p.out_t = transposed ? out.data_t.data_ptr() : nullptr;
  p.inv_scale = out.inv_scale.data_ptr<float>();
  void* stream = at::cuda::getCurrentCUDAStream().stream();
  kernels::run_fp8_amax(p, stream);
  kernels::run_fp8_cast(p, stream);
  return out;
#else
  (void)f;
  TORCH_CHECK(false, "fp8_quantize on CUDA needs the lmscale kernels, which this build lacks: rebuild with nvcc");
#endif
}

Fp8Tensor fp8_quantize(const at::Tensor& x_in, at::ScalarType fp8, bool row_major, bool transposed,
                       const at::Tensor& amax_bits) {
  TORCH_CHECK(x_in.dim() == 2, "fp8_quantize: x must be 2-D (rows, cols), got ", x_in.sizes());
  TORCH_CHECK(row_major || transposed, "fp8_quantize: ask for at least one layout");
  (void)format_of(fp8);
  auto opts = x_in.options().dtype(fp8);
  Fp8Tensor out;
  if (row_major) out.data = at::empty({x_in.size(0), x_in.size(1)}, opts);
  if (transposed) out.data_t = at::empty({x_in.size(1), x_in.size(0)}, opts);
  out.inv_scale = at::empty({}, x_in.options().dtype(at::kFloat));
  fp8_quantize_into(x_in, amax_bits, out);
  return out;
}

int64_t fp8_casts_with_own_amax() { return casts_with_own_amax.load(); }

void fp8_quantize_into(const at::Tensor& x_in, const at::Tensor& amax_bits, Fp8Tensor& out) {
  TORCH_CHECK(x_in.dim() == 2 && (x_in.scalar_type() == at::kBFloat16 || x_in.scalar_type() == at::kFloat),
              "fp8_quantize_into: x must be 2-D bf16 or fp32, got ", x_in.scalar_type(), " ", x_in.sizes());
  TORCH_CHECK(out.data.defined() || out.data_t.defined(), "fp8_quantize_into: out has no buffer to write");
  TORCH_CHECK(out.inv_scale.defined() && out.inv_scale.scalar_type() == at::kFloat && out.inv_scale.numel() == 1,
              "fp8_quantize_into: out.inv_scale must be one fp32 element");
  TORCH_CHECK(amax_bits.scalar_type() == at::kInt && amax_bits.numel() == 1 && amax_bits.device() == x_in.device(),
              "fp8_quantize_into: amax_bits must be one int32 on x's device");
  const auto fp8 = out.data.defined() ? out.data.scalar_type() : out.data_t.scalar_type();
  const auto f = format_of(fp8);
  const int64_t R = x_in.size(0), C = x_in.size(1);
  TORCH_CHECK((!out.data.defined() || (out.data.sizes() == x_in.sizes() && out.data.is_contiguous())) &&
                  (!out.data_t.defined() || (out.data_t.size(0) == C && out.data_t.size(1) == R &&
                                             out.data_t.is_contiguous())),
              "fp8_quantize_into: the buffers do not fit x ", x_in.sizes());
  if (!x_in.is_cuda()) {
    const float amax = amax_bits.view(at::kFloat).item<float>();
    const float s = kernels::fp8_scale_from_amax(amax, f);
    auto q = cast_scaled(x_in, s, fp8);
    if (out.data.defined()) out.data.copy_(q);
    if (out.data_t.defined()) out.data_t.copy_(q.t());
    out.inv_scale.fill_(1.f / s);
    return;
  }
#ifdef LMSCALE_HAS_KERNELS
  c10::cuda::CUDAGuard guard(x_in.device());
  const auto x = x_in.contiguous();
  kernels::Fp8CastParams p;
  p.x = x.data_ptr();
  p.rows = R;
  p.cols = C;
  p.dtype = x.scalar_type() == at::kBFloat16 ? kernels::FusedDtype::kBF16 : kernels::FusedDtype::kFP32;
  p.format = f;
  p.amax_bits = reinterpret_cast<uint32_t*>(amax_bits.data_ptr<int32_t>());
  p.out = out.data.defined() ? out.data.data_ptr() : nullptr;
  p.out_t = out.data_t.defined() ? out.data_t.data_ptr() : nullptr;
  p.inv_scale = out.inv_scale.data_ptr<float>();
  kernels::run_fp8_cast(p, at::cuda::getCurrentCUDAStream().stream());
#else
  TORCH_CHECK(false, "fp8_quantize_into on CUDA needs the lmscale kernels, which this build lacks: rebuild with nvcc");
#endif
}

}  // namespace lmscale::ops
