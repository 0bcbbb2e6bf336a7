// The fused layers (RMSNorm + residual, SwiGLU, QKV-split + RoPE, cross-entropy) as torch.ops.lmscale.*
// forward/backward op pairs, for PyTorch models (python/lmscale/nn): the schemas and their registrations
// only. Each op is the plain forward or backward function of its bridge, ops/fused_{rmsnorm,swiglu,rope,
// cross_entropy}.h (the same functions the C++ model's autograd Functions call), which picks the kernel
// or the ATen reference itself; autograd and fake kernels are registered by the Python package, as for
// flash_attention.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "ops/fused_cross_entropy.h"
#include "ops/fused_rmsnorm.h"
#include "ops/fused_rope.h"
#include "ops/fused_swiglu.h"

namespace lmscale::ops {
namespace {

using at::Tensor;

// ------------------------------------------------------------------ the schemas' signatures
// The bridges' functions with the schemas' arguments: no FP8 slots (the C++ model's alone), and
// ignore_index always given (PyTorch's -100 by default).

std::tuple<Tensor, Tensor, Tensor> rms_norm_forward_op(const Tensor& x, const std::optional<Tensor>& residual,
                                                       const Tensor& weight, double eps,
                                                       std::optional<at::ScalarType> out_dtype) {
  return rms_norm_forward(x, residual, weight, eps, out_dtype);
}
std::tuple<Tensor, Tensor, Tensor> rms_norm_backward_op(const Tensor& dy, const std::optional<Tensor>& dh,
                                                        const Tensor& h, const Tensor& weight, const Tensor& rstd,
                                                        std::optional<at::ScalarType> residual_dtype) {
  return rms_norm_backward(dy, dh, h, weight, rstd, residual_dtype);
}
Tensor swiglu_forward_op(const Tensor& a, const Tensor& b) { return swiglu_forward(a, b); }
std::tuple<Tensor, Tensor> swiglu_backward_op(const Tensor& dout, const Tensor& a, const Tensor& b) {
  return swiglu_backward(dout, a, b);
}
std::tuple<Tensor, Tensor, Tensor> rope_qkv_forward_op(const Tensor& qkv, const Tensor& rotation, int64_t heads,
                                                       bool rotate_half) {
  return rope_qkv_forward(qkv, rotation, heads, rotate_half);
}
Tensor rope_qkv_backward_op(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& rotation,
                            int64_t heads, bool rotate_half) {
  return rope_qkv_backward(dq, dk, dv, rotation, heads, rotate_half);
}
std::tuple<Tensor, Tensor> cross_entropy_forward_op(const Tensor& logits, const Tensor& targets, int64_t reduction,
                                                    int64_t ignore_index, double label_smoothing) {
  return cross_entropy_forward(logits, targets, reduction, ignore_index, label_smoothing);
}
Tensor cross_entropy_backward_op(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets,
                                 const Tensor& stats, int64_t reduction, int64_t ignore_index,
                                 double label_smoothing) {
  return cross_entropy_backward(grad_loss, logits, targets, stats, reduction, ignore_index, label_smoothing);
}

// One set of functions for the CPU and CUDA keys: each picks the kernel or the reference itself.
void register_fused_ops(torch::Library& m) {
  m.impl("rms_norm_forward", TORCH_FN(rms_norm_forward_op));
  m.impl("rms_norm_backward", TORCH_FN(rms_norm_backward_op));
  m.impl("swiglu_forward", TORCH_FN(swiglu_forward_op));
  m.impl("swiglu_backward", TORCH_FN(swiglu_backward_op));
  m.impl("rope_qkv_forward", TORCH_FN(rope_qkv_forward_op));
  m.impl("rope_qkv_backward", TORCH_FN(rope_qkv_backward_op));
  m.impl("cross_entropy_forward", TORCH_FN(cross_entropy_forward_op));
  m.impl("cross_entropy_backward", TORCH_FN(cross_entropy_backward_op));
}

// ------------------------------------------------------------------ autograd: calls that record no graph stay in C++
// The autograd formulas of the fused ops and of flash_attention_{forward,backward} are Python
// (torch.library.register_autograd in python/lmscale/nn/_ops.py and attention.py, on the Autograd alias key).
// A Python kernel costs every call a trip through the interpreter, even the calls it only passes on below
// autograd: every call of a torch.compile'd graph (its forward and backward run with grad off) and every
// backward op in eager (10-50 µs a call on a dev VM's CPU; tools/probes/drop_in/drop_in_host.py measures
// it on the CUDA path). This kernel, registered on AutogradCPU and AutogradCUDA (a kernel on a backend's
// autograd key comes before one on the alias), passes those calls below autograd itself, as the Python
// kernel would; a call that records a graph (grad on, an input requiring grad) goes to the Python formula
// through AutogradOther, which the alias also fills (and which, with no formula registered, gives the same
// not-implemented fallback as before).
bool any_requires_grad(const torch::jit::Stack& stack, size_t n_args) {
  for (size_t i = stack.size() - n_args; i < stack.size(); ++i) {
    const auto& v = stack[i];
    if (v.isTensor() && v.toTensor().requires_grad()) return true;
    if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorList().vec())
        if (t.requires_grad()) return true;
  }
  return false;
}

void autograd_without_python(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  if (at::GradMode::is_enabled() && any_requires_grad(*stack, op.schema().arguments().size())) {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::AutogradOther) | (keys & c10::after_autograd_keyset),
                       stack);
    return;
  }
  at::AutoDispatchBelowAutograd below;  // as the Python kernel's no-grad path: nested ATen calls skip autograd too
  op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
}

// Every op whose autograd formula is Python, flash_attention's two (src/ops/flash_attention.cpp) included, in
// one list.
void register_autograd_without_python(torch::Library& m) {
  for (const char* name : {"rms_norm_forward", "rms_norm_backward", "swiglu_forward", "swiglu_backward",
                           "rope_qkv_forward", "rope_qkv_backward", "cross_entropy_forward", "cross_entropy_backward",
                           "flash_attention_forward", "flash_attention_backward", "flash_attention_varlen_forward",
                           "flash_attention_varlen_backward"})
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&autograd_without_python>());
}

}  // namespace
}  // namespace lmscale::ops

TORCH_LIBRARY_FRAGMENT(lmscale, m) {
  m.def("rms_norm_forward(Tensor x, Tensor? residual, Tensor weight, float eps, ScalarType? out_dtype=None) "
        "-> (Tensor h, Tensor y, Tensor rstd)");
  m.def("rms_norm_backward(Tensor dy, Tensor? dh, Tensor h, Tensor weight, Tensor rstd, "
        "ScalarType? residual_dtype=None) -> (Tensor dx, Tensor dweight, Tensor dresidual)");
  m.def("swiglu_forward(Tensor a, Tensor b) -> Tensor");
  m.def("swiglu_backward(Tensor dout, Tensor a, Tensor b) -> (Tensor da, Tensor db)");
  m.def("rope_qkv_forward(Tensor qkv, Tensor rotation, int heads, bool rotate_half=False) "
        "-> (Tensor q, Tensor k, Tensor v)");
  m.def("rope_qkv_backward(Tensor dq, Tensor dk, Tensor dv, Tensor rotation, int heads, bool rotate_half=False) "
        "-> Tensor");
  m.def("cross_entropy_forward(Tensor logits, Tensor targets, int reduction=1, int ignore_index=-100, "
        "float label_smoothing=0.0) -> (Tensor loss, Tensor stats)");
  m.def("cross_entropy_backward(Tensor grad_loss, Tensor logits, Tensor targets, Tensor stats, int reduction=1, "
        "int ignore_index=-100, float label_smoothing=0.0) -> Tensor");
}

TORCH_LIBRARY_IMPL(lmscale, CPU, m) { lmscale::ops::register_fused_ops(m); }
TORCH_LIBRARY_IMPL(lmscale, CUDA, m) { lmscale::ops::register_fused_ops(m); }
TORCH_LIBRARY_IMPL(lmscale, AutogradCPU, m) { lmscale::ops::register_autograd_without_python(m); }
TORCH_LIBRARY_IMPL(lmscale, AutogradCUDA, m) { lmscale::ops::register_autograd_without_python(m); }
