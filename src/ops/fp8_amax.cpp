// Amax slots and the separate amax pass; see fp8_amax.h.
#include "ops/fp8_amax.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <torch/autograd.h>

#include <utility>

#include "ops/fp8_history.h"

#ifdef LMSCALE_HAS_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/fp8_cast_params.h"
#endif

namespace lmscale::ops {
namespace {

// max |x| from the definition in ATen: the float bits of each |x| (sign cleared, NaN payload kept; bf16
// widens to fp32 exactly), their integer max. Any device, no host sync.
at::Tensor amax_aten(const at::Tensor& x) {
  if (x.numel() == 0) return at::zeros({1}, x.options().dtype(at::kInt));
  return x.to(at::kFloat).view(at::kInt).bitwise_and(0x7fffffff).amax().reshape({1});
}

struct RecordGradAmax : torch::autograd::Function<RecordGradAmax> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const Fp8AmaxSlot& slot) {
    save_fp8_amax_slot(ctx, "slot", slot);
    return x;  // autograd returns an alias of the input
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    auto slot = saved_fp8_amax_slot(ctx, "slot");
    auto dx = g[0].defined() ? g[0].contiguous() : g[0];
    if (slot && dx.defined()) slot->record(dx, fp8_amax(dx));
    return {dx, at::Tensor()};
  }
};

}  // namespace

void Fp8Amax::record(const at::Tensor& t, at::Tensor bits) {
  TORCH_CHECK(t.is_contiguous() && bits.scalar_type() == at::kInt && bits.numel() == 1,
              "Fp8Amax::record: t must be contiguous and bits one int32");
  if (history_.defined()) fold_fp8_amax(history_, bits);
  if (t.is_inference()) {  // no version counter to tell later writes by: the consumer takes its own amax
    bits_.reset();
    return;
  }
  bits_ = std::move(bits);
  remember(t);
}

void Fp8Amax::record_quantized(const at::Tensor& t, Fp8Tensor q) {
  TORCH_CHECK(t.is_contiguous() && !t.is_inference(), "Fp8Amax::record_quantized: t must be contiguous and not an "
              "inference tensor (its version counter tells the consumer it is the tensor handed on)");
  TORCH_CHECK(q.data.defined() && q.inv_scale.defined(), "Fp8Amax::record_quantized: q needs its row-major data");
  quantized_ = std::move(q);
  bits_.reset();
  remember(t);
}

void Fp8Amax::remember(const at::Tensor& t) {
  storage_ = t.storage().getWeakStorageImpl();
  offset_ = t.storage_offset();
  numel_ = t.numel();
  version_ = t._version();
  dtype_ = t.scalar_type();
}

bool Fp8Amax::is_recorded(const at::Tensor& x) const {
  if (!storage_ || !x.defined() || !x.has_storage() || x.is_inference()) return false;
  const auto alive = storage_->lock();
  return alive && alive.get() == x.storage().unsafeGetStorageImpl() && x.storage_offset() == offset_ &&
         x.numel() == numel_ && x.scalar_type() == dtype_ && x.is_contiguous() && x._version() == version_;
}

at::Tensor Fp8Amax::bits_for(const at::Tensor& x) const {
  return bits_.defined() && is_recorded(x) ? bits_ : at::Tensor();
}

void Fp8Amax::attach_history(at::Tensor history, at::ScalarType format, bool delayed) {
  history_ = std::move(history);
  history_format_ = format;
  delayed_ = delayed;
}

bool Fp8Amax::delayed() const { return delayed_ && history_.defined() && !c10::InferenceMode::is_enabled(); }

std::optional<Fp8Tensor> Fp8Amax::take_quantized(const at::Tensor& x) {
  if (!quantized_) return std::nullopt;
  TORCH_CHECK(is_recorded(x), "FP8 delayed scaling: the operand its producer wrote in FP8 reached its GEMM as another "
              "tensor (", x.sizes(), "), whose bf16 memory nobody wrote. Likely causes: autograd summed this "
              "gradient with another, or something wrote the tensor in between. Run with --fp8-scaling dynamic, "
              "and report the model change that caused it");
  auto q = std::move(quantized_);
  quantized_.reset();
  return q;
}

Fp8AmaxSlot new_fp8_amax_slot() { return c10::make_intrusive<Fp8Amax>(); }

at::Tensor empty_fp8_amax_bits(const at::Tensor& like) { return at::empty({1}, like.options().dtype(at::kInt)); }

at::Tensor fp8_amax_bits_for(const Fp8AmaxSlot& slot, const at::Tensor& t, uint32_t*& param) {
  if (!slot) return {};
  auto bits = empty_fp8_amax_bits(t);
  param = reinterpret_cast<uint32_t*>(bits.data_ptr<int32_t>());
  return bits;
}

at::Tensor fp8_amax(const at::Tensor& x_in) {
  TORCH_CHECK(x_in.scalar_type() == at::kBFloat16 || x_in.scalar_type() == at::kFloat, "fp8_amax: x is ",
              x_in.scalar_type(), "; give bf16 or fp32");
#ifdef LMSCALE_HAS_KERNELS
  // The kernel takes (rows, cols) with both multiples of 16, 16-byte aligned; ATen does the rest.
  const int64_t cols = x_in.dim() ? x_in.size(-1) : 1, rows = cols ? x_in.numel() / cols : 0;
  if (x_in.is_cuda() && rows % 16 == 0 && cols % 16 == 0) {
    c10::cuda::CUDAGuard guard(x_in.device());
    const auto x = x_in.contiguous();
    if (reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0) {
      auto bits = empty_fp8_amax_bits(x);  // zeroed by run_fp8_amax
      kernels::Fp8CastParams p;
      p.x = x.data_ptr();
      p.rows = rows;
      p.cols = cols;
      p.dtype = x.scalar_type() == at::kBFloat16 ? kernels::FusedDtype::kBF16 : kernels::FusedDtype::kFP32;
      p.amax_bits = reinterpret_cast<uint32_t*>(bits.data_ptr<int32_t>());
      kernels::run_fp8_amax(p, at::cuda::getCurrentCUDAStream().stream());
      return bits;
    }
  }
#endif
  return amax_aten(x_in);
}

at::Tensor record_grad_amax(const at::Tensor& x, const Fp8AmaxSlot& slot) {
  if (!slot) return x;
  return RecordGradAmax::apply(x, slot);
}

void save_fp8_amax_slot(torch::autograd::AutogradContext* ctx, const std::string& key, const Fp8AmaxSlot& slot) {
  if (slot) ctx->saved_data[key] = c10::IValue::make_capsule(c10::intrusive_ptr<torch::CustomClassHolder>(slot));
}

Fp8AmaxSlot saved_fp8_amax_slot(torch::autograd::AutogradContext* ctx, const std::string& key) {
  const auto it = ctx->saved_data.find(key);
  if (it == ctx->saved_data.end()) return {};
  return c10::static_intrusive_pointer_cast<Fp8Amax>(it->second.toCapsule());
}

}  // namespace lmscale::ops
