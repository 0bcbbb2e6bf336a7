// The bridge to the FP8 cast kernels (src/kernels/fp8_cast.cu) and their CPU twin: a 2-D tensor
// quantized with one dynamic per-tensor scale (kernels/fp8_scale.h), computed on the tensor's device,
// so inside a CUDA graph nothing waits for the host. The GEMM that reads the result is fp8_gemm.h.
#pragma once
#include <ATen/core/Tensor.h>

namespace lmscale::ops {

// x (rows, cols) in FP8 with its decode factor: x ≈ data · inv_scale (exactly, for every value that
// FP8 represents after scaling).
struct Fp8Tensor {
  at::Tensor data;       // (rows, cols) row-major FP8, undefined unless asked for
  at::Tensor data_t;     // (cols, rows) row-major FP8, i.e. xᵀ, undefined unless asked for
  at::Tensor inv_scale;  // fp32 0-d tensor on x's device: 1/s
};

// Quantizes x (rows, cols), bf16 or fp32, contiguous (made so otherwise), to `fp8` (at::kFloat8_e4m3fn
// or at::kFloat8_e5m2): s from the amax of x (fp8_scale_from_amax), q = fp8(x·s) rounded to nearest
// even. A non-finite element makes every element NaN (see fp8_scale.h). On CUDA two kernels (amax,
// then cast writing the layouts asked for in one pass); elsewhere the same math in ATen ops. rows
// and cols must be multiples of 16 on CUDA (the FP8 GEMM's rule; fp8_shapes_ok).
Fp8Tensor fp8_quantize(const at::Tensor& x, at::ScalarType fp8, bool row_major, bool transposed);

// The same with x's amax already taken (`amax_bits`: int32, one element, max |x| as float bits,
// fp8_scale.h), e.g. by the kernel that wrote x (ops/fp8_amax.h): only the cast runs. Bit-identical to
// the call above when amax_bits is x's amax.
Fp8Tensor fp8_quantize(const at::Tensor& x, at::ScalarType fp8, bool row_major, bool transposed,
                       const at::Tensor& amax_bits);

// How many fp8_quantize calls in this process took their own amax (the form without amax_bits): the
// tests count the amax passes that the producers' amax spared.
int64_t fp8_casts_with_own_amax();

// Quantizes x into out's existing buffers (out.data and/or out.data_t, whichever are defined, their
// dtype the format; out.inv_scale written), with the scale from `amax_bits` (int32, one element:
// max |x| as float bits, fp8_scale.h) taken elsewhere, e.g. by the AdamW kernel as it wrote x. One
// kernel on CUDA, no amax pass; the buffers keep their addresses (cached FP8 weights, CUDA graphs).
void fp8_quantize_into(const at::Tensor& x, const at::Tensor& amax_bits, Fp8Tensor& out);

// The scale rule itself, for tests and the CPU path: s for a tensor whose max |x| is amax.
float fp8_scale(float amax, at::ScalarType fp8);

// Whether an (m, k) · (k, n) product can run as an FP8 GEMM: every dim a multiple of 16.
bool fp8_shapes_ok(int64_t m, int64_t k, int64_t n);

}  // namespace lmscale::ops
