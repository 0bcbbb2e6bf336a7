// FP8 GEMM; see fp8_gemm.h.
#include "ops/fp8_gemm.h"

#include <ATen/ATen.h>

#ifdef LMSCALE_HAS_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace lmscale::ops {

at::Tensor fp8_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& inv_a, const at::Tensor& inv_b,
                  at::ScalarType out_dtype, bool fast_accum) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "fp8_mm: a ", a.sizes(), " and b ", b.sizes(),
              " do not multiply: need (M, K) and (K, N)");
  TORCH_CHECK(!(a.scalar_type() == at::kFloat8_e5m2 && b.scalar_type() == at::kFloat8_e5m2),
              "fp8_mm: e5m2 times e5m2 has no FP8 GEMM: quantize one side as e4m3");
  TORCH_CHECK(out_dtype == at::kBFloat16 || out_dtype == at::kFloat, "fp8_mm: out_dtype ", out_dtype,
              " is not supported: use bf16 or fp32");
  if (a.is_cuda()) {
    TORCH_CHECK(a.stride(1) == 1 && b.stride(0) == 1, "fp8_mm: a must be row-major and b column-major (bᵀ "
                "contiguous); got strides ", a.strides(), " and ", b.strides());
    return at::_scaled_mm(a, b, inv_a, inv_b, /*bias=*/std::nullopt, /*scale_result=*/std::nullopt, out_dtype,
                          fast_accum);
  }
  // Every FP8 value and every product of two is exact in fp32: only the sums round, as in the GEMM.
  auto out = at::mm(a.to(at::kFloat), b.to(at::kFloat)) * (inv_a * inv_b);
  return out.to(out_dtype);
}

std::string fp8_unsupported_reason(const at::Device& device) {
  const std::string supported = "FP8 training needs an NVIDIA Hopper GPU (compute capability 9.x: H100, H200, "
                                "GH200); use --precision bf16 (or fp16, fp32) here";
  if (!device.is_cuda()) return "precision fp8 is not supported on " + device.str() + ": " + supported;
#ifdef LMSCALE_HAS_KERNELS
  const auto* prop = at::cuda::getDeviceProperties(device.index() < 0 ? at::cuda::current_device() : device.index());
  if (prop->major != 9)
    return "precision fp8 is not supported on " + std::string(prop->name) + " (compute capability " +
           std::to_string(prop->major) + "." + std::to_string(prop->minor) + "): " + supported;
  return "";
#else
  return "precision fp8 needs the lmscale kernels, which this build lacks (rebuild with nvcc): " + supported;
#endif
}

}  // namespace lmscale::ops
