// The input rules every fused op (ops/fused_{rmsnorm,swiglu,rope,cross_entropy}.cpp) applies the same
// way, for the C++ model and torch.ops.lmscale.* alike: one device, float data, the dtypes the kernels
// take and the references' math dtype. Each op's own shape checks stay in its file.
#pragma once
#include <ATen/core/Tensor.h>

#include <initializer_list>
#include <utility>

#ifdef LMSCALE_HAS_KERNELS
#include "kernels/fused_dtype.h"
#endif

namespace lmscale::ops {

// The math dtype of the references: fp32, or fp64 for fp64 inputs (the tests' oracle).
inline at::ScalarType fused_math_dtype(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

// Whether the fused kernels read and write this dtype (bf16 and fp32; fp16 runs the reference).
inline bool fused_kernel_dtype(at::ScalarType t) { return t == at::kBFloat16 || t == at::kFloat; }

// PyTorch's rules for the inputs of one op: every defined tensor on one device (a tensor left on `meta`
// or on another device is refused by name, never read) ...
void check_one_device(const char* op, std::initializer_list<std::pair<const char*, const at::Tensor*>> tensors);
// ... and float data where the math is float.
void check_floating(const char* op, const char* name, const at::Tensor& t);

#ifdef LMSCALE_HAS_KERNELS
inline kernels::FusedDtype fused_dtype(at::ScalarType t) {
  return t == at::kBFloat16 ? kernels::FusedDtype::kBF16 : kernels::FusedDtype::kFP32;
}
#endif

}  // namespace lmscale::ops
