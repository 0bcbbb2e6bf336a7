// The amax of an FP8 operand taken by the kernel that wrote it (no pass of its own). A producer (RMSNorm, the
// SwiGLU gate, RoPE's backward: ops/fused_*) given an Fp8Amax slot stores max |t| of the tensor t it
// writes there; the FP8 cast of t (ops/fp8_quantize.h) then reads that amax instead of running its
// own pass over t. The slot also knows which tensor its amax is of, so a consumer handed anything else
// (a copy, a sum of gradients, a tensor written since) gets nothing and runs the separate pass.
// Under delayed scaling the slot also carries the operand's amax history (ops/fp8_history.h) and, once
// that is seeded, the FP8 form the producer wrote instead of the tensor itself (record_quantized).
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/autograd/custom_function.h>

#include <optional>
#include <string>

#include "ops/fp8_quantize.h"

namespace lmscale::ops {

class Fp8Amax : public torch::CustomClassHolder {
 public:
  // Producer side: `bits` (int32, one element, on t's device) holds max |t| as float bits (kernels/
  // fp8_scale.h's abs_bits) once the work enqueued so far has run; t contiguous.
  void record(const at::Tensor& t, at::Tensor bits);
  // Consumer side: the bits recorded for x's elements as they are now (x a contiguous view of the
  // recorded tensor: same storage, offset, count and dtype, unwritten since), undefined otherwise.
  at::Tensor bits_for(const at::Tensor& x) const;

  // Delayed scaling: `history` is the operand's row (ops/fp8_history.h). While `delayed` is false (the
  // first step: no history yet) producers take the dynamic path and record() folds their amax into the
  // history; once true, a producer that can writes the operand in FP8 with the history's scale.
  // `format` is the history's (Float8_e4m3fn or Float8_e5m2), kept here so producers need not read it back.
  void attach_history(at::Tensor history, at::ScalarType format, bool delayed);
  const at::Tensor& history() const { return history_; }
  at::ScalarType history_format() const { return history_format_; }
  // Not under InferenceMode: record_quantized needs t's version counter.
  bool delayed() const;
  // Producer side, delayed: `t` is the tensor the producer hands on (same shape and dtype as the
  // operand, its memory never written: no consumer but the FP8 GEMM reads it) and `q` the operand in FP8.
  void record_quantized(const at::Tensor& t, Fp8Tensor q);
  // Consumer side: the FP8 form recorded for x (x a contiguous view of that very t, as for bits_for),
  // handed over once: the slot lets go of it, so its memory lives only as long as the consumer keeps
  // it (a slot lives until the backward ends). nullopt when none is held. Throws when one is held for
  // another tensor: x then holds memory nobody wrote (e.g. autograd summed the gradient with another),
  // and casting it would be silent garbage.
  std::optional<Fp8Tensor> take_quantized(const at::Tensor& x);

 private:
  void remember(const at::Tensor& t);
  bool is_recorded(const at::Tensor& x) const;
  at::Tensor bits_;
  at::Tensor history_;
  at::ScalarType history_format_ = at::kFloat8_e4m3fn;
  bool delayed_ = false;
  std::optional<Fp8Tensor> quantized_;
  // Who the amax is of. A weak reference: the slot must not keep a gradient alive, and a dead
  // storage's memory may be reused by another tensor, which this tells apart.
  std::optional<c10::weak_intrusive_ptr<c10::StorageImpl>> storage_;
  int64_t offset_ = 0, numel_ = 0, version_ = 0;
  at::ScalarType dtype_ = at::kFloat;
};
using Fp8AmaxSlot = c10::intrusive_ptr<Fp8Amax>;

// A fresh slot; an undefined Fp8AmaxSlot asks a producer for nothing.
Fp8AmaxSlot new_fp8_amax_slot();

// The separate pass: max |x| as float bits, an int32 (1) tensor on x's device (x bf16 or fp32; on CUDA
// fp8_amax_kernel, elsewhere ATen with the same contract: NaN kept with its payload, −0 as 0).
at::Tensor fp8_amax(const at::Tensor& x);

// The slot a producer writes into for a tensor like `like`: int32 (1), uninitialised (the producer's
// launcher zeroes it on the stream, CUDA-graph safe).
at::Tensor empty_fp8_amax_bits(const at::Tensor& like);
// For a producer kernel that takes t's amax as it writes t: when `slot` asks for it, such bits with
// `param` (the kernel's params field) pointed at them; otherwise an undefined tensor, `param` untouched.
at::Tensor fp8_amax_bits_for(const Fp8AmaxSlot& slot, const at::Tensor& t, uint32_t*& param);

// Identity in forward; backward records its gradient's amax (fp8_amax) into `slot` and passes the
// gradient on unchanged. The ATen producers' stand-in for a kernel that takes the amax as it writes:
// the same contract, so the CPU path and any fallback hand the consumer the same amax.
at::Tensor record_grad_amax(const at::Tensor& x, const Fp8AmaxSlot& slot);

// A slot carried from a custom autograd Function's forward to its backward (saved_data).
void save_fp8_amax_slot(torch::autograd::AutogradContext* ctx, const std::string& key, const Fp8AmaxSlot& slot);
Fp8AmaxSlot saved_fp8_amax_slot(torch::autograd::AutogradContext* ctx, const std::string& key);

}  // namespace lmscale::ops
