// Delayed-scaling histories and the ATen delayed cast; see fp8_history.h.
#include "ops/fp8_history.h"

#include <ATen/ATen.h>
#include <ATen/core/LegacyTypeDispatch.h>

#include <cstddef>

#include "ops/fp8_amax.h"

#ifdef LMSCALE_HAS_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/fp8_cast_params.h"
#endif

namespace lmscale::ops {
namespace {

constexpr int64_t kAmaxWord = offsetof(kernels::Fp8History, amax) / 4;
constexpr int64_t kScaleWord = offsetof(kernels::Fp8History, scale) / 4;
constexpr int64_t kInvScaleWord = offsetof(kernels::Fp8History, inv_scale) / 4;
constexpr int64_t kFormatWord = offsetof(kernels::Fp8History, format) / 4;

void check_row(const at::Tensor& h, const char* what) {
  TORCH_CHECK(h.scalar_type() == at::kInt && h.dim() == 1 && h.numel() == kernels::kFp8HistoryWords &&
                  h.is_contiguous(),
              what, ": a history is one contiguous int32 row of ", kernels::kFp8HistoryWords, " (new_fp8_histories)");
}

at::ScalarType format_dtype(const at::Tensor& h) {
  // One word read back from the device: only the CPU path and setup need it, never a CUDA-graph step.
  const auto f = h.select(0, kFormatWord).item<int32_t>();
  return f == static_cast<int32_t>(kernels::Fp8Format::kE4M3) ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
}

}  // namespace

at::Tensor new_fp8_histories(const std::vector<at::ScalarType>& formats, const at::Device& device) {
  auto host = at::empty({static_cast<int64_t>(formats.size()), kernels::kFp8HistoryWords}, at::dtype(at::kInt));
  auto* rows = reinterpret_cast<kernels::Fp8History*>(host.data_ptr<int32_t>());
  for (size_t i = 0; i < formats.size(); ++i) {
    TORCH_CHECK(formats[i] == at::kFloat8_e4m3fn || formats[i] == at::kFloat8_e5m2, "new_fp8_histories: ",
                formats[i], " is not an FP8 format: use Float8_e4m3fn or Float8_e5m2");
    rows[i] = kernels::fp8_history_init(formats[i] == at::kFloat8_e4m3fn ? kernels::Fp8Format::kE4M3
                                                                         : kernels::Fp8Format::kE5M2);
  }
  return host.to(device);
}

void roll_fp8_histories(const at::Tensor& histories) {
  TORCH_CHECK(histories.scalar_type() == at::kInt && histories.dim() == 2 &&
                  histories.size(1) == kernels::kFp8HistoryWords && histories.is_contiguous(),
              "roll_fp8_histories: need (n, ", kernels::kFp8HistoryWords, ") contiguous int32, got ",
              histories.sizes());
  auto* rows = reinterpret_cast<kernels::Fp8History*>(histories.data_ptr<int32_t>());
  if (histories.is_cuda()) {
#ifdef LMSCALE_HAS_KERNELS
    c10::cuda::CUDAGuard guard(histories.device());
    kernels::run_fp8_history_roll(rows, histories.size(0), at::cuda::getCurrentCUDAStream().stream());
    return;
#else
    TORCH_CHECK(false, "roll_fp8_histories on CUDA needs the lmscale kernels, which this build lacks");
#endif
  }
  for (int64_t i = 0; i < histories.size(0); ++i) kernels::fp8_history_roll(rows[i]);
}

at::Tensor fp8_history_inv_scale(const at::Tensor& h) {
  check_row(h, "fp8_history_inv_scale");
  return h.view(at::kFloat).select(0, kInvScaleWord);
}

at::Tensor fp8_history_scale(const at::Tensor& h) {
  check_row(h, "fp8_history_scale");
  return h.view(at::kFloat).select(0, kScaleWord);
}

kernels::Fp8History* fp8_history_ptr(const at::Tensor& h) {
  check_row(h, "fp8_history_ptr");
  return reinterpret_cast<kernels::Fp8History*>(h.data_ptr<int32_t>());
}

void fold_fp8_amax(const at::Tensor& h, const at::Tensor& amax_bits) {
  check_row(h, "fold_fp8_amax");
  TORCH_CHECK(amax_bits.scalar_type() == at::kInt && amax_bits.numel() == 1, "fold_fp8_amax: amax_bits must be one int32");
  // Below autograd's in-place layer: the history is written as the kernels write it (raw, no version
  // bump), so a view of it that autograd saved this step (a GEMM's inv_scale) stays valid.
  at::AutoDispatchBelowADInplaceOrView raw;
  auto word = h.narrow(0, kAmaxWord, 1);
  word.copy_(at::maximum(word, amax_bits.reshape({1}).to(h.device())));
}

Fp8Tensor fp8_quantize_delayed(const at::Tensor& x, const at::Tensor& h, bool row_major, bool transposed) {
  check_row(h, "fp8_quantize_delayed");
  TORCH_CHECK(x.dim() == 2 && (x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kFloat),
              "fp8_quantize_delayed: x must be 2-D bf16 or fp32, got ", x.scalar_type(), " ", x.sizes());
  TORCH_CHECK(row_major || transposed, "fp8_quantize_delayed: ask for at least one layout");
  TORCH_CHECK(h.device() == x.device(), "fp8_quantize_delayed: the history is on ", h.device(), ", x on ", x.device());
  const auto fp8 = format_dtype(h);
  const double m = kernels::fp8_max(fp8 == at::kFloat8_e4m3fn ? kernels::Fp8Format::kE4M3 : kernels::Fp8Format::kE5M2);
  const auto bits = fp8_amax(x);
  fold_fp8_amax(h, bits);
  {
    // A stored inf or NaN: the decode factor turns NaN, so the GEMM's output does (the kernels' rule).
    at::AutoDispatchBelowADInplaceOrView raw;
    auto inv = fp8_history_inv_scale(h);
    inv.copy_(at::where(bits.reshape({}) >= 0x7f800000, at::full({}, NAN, inv.options()), inv));
  }
  // clamp saturates (ATen's cast does not) and keeps NaN; x·s is exact (s a power of two).
  auto q = (x.to(at::kFloat) * fp8_history_scale(h)).clamp(-m, m).to(fp8);
  Fp8Tensor out;
  if (row_major) out.data = q;
  if (transposed) out.data_t = q.t().contiguous();
  out.inv_scale = fp8_history_inv_scale(h);
  return out;
}

Fp8Tensor fp8_delayed_outputs(const Fp8AmaxSlot& slot, const at::Tensor& t, kernels::Fp8DelayedOut& o) {
  TORCH_CHECK(slot && slot->history().defined(), "fp8_delayed_outputs: the slot carries no history");
  const auto& h = slot->history();
  const int64_t cols = t.size(-1), rows = cols ? t.numel() / cols : 0;
  const auto fp8 = slot->history_format();  // known on the host: no read of the device row
  Fp8Tensor q;
  q.data = at::empty({rows, cols}, t.options().dtype(fp8));
  q.data_t = at::empty({cols, rows}, t.options().dtype(fp8));
  q.inv_scale = fp8_history_inv_scale(h);
  o.history = fp8_history_ptr(h);
  o.data = q.data.data_ptr();
  o.data_t = q.data_t.data_ptr();
  return q;
}

void fp8_weight_finish(Fp8Tensor& w, const at::Tensor& h) {
  check_row(h, "fp8_weight_finish");
  TORCH_CHECK(w.data.defined() && w.data_t.defined() && w.inv_scale.defined() && w.data.dim() == 2 &&
                  w.data_t.size(0) == w.data.size(1) && w.data_t.size(1) == w.data.size(0) &&
                  w.data.device() == h.device(),
              "fp8_weight_finish: the weight needs both FP8 layouts and its decode factor on the history's device");
  if (h.is_cuda()) {
#ifdef LMSCALE_HAS_KERNELS
    c10::cuda::CUDAGuard guard(h.device());
    kernels::run_fp8_weight_finish(w.data.data_ptr(), w.data_t.data_ptr(), w.data.size(0), w.data.size(1),
                                   fp8_history_ptr(h), w.inv_scale.data_ptr<float>(),
                                   at::cuda::getCurrentCUDAStream().stream());
    return;
#else
    TORCH_CHECK(false, "fp8_weight_finish on CUDA needs the lmscale kernels, which this build lacks");
#endif
  }
  w.data_t.copy_(w.data.t());
  w.inv_scale.copy_(fp8_history_inv_scale(h));
  roll_fp8_histories(h.unsqueeze(0));
}

}  // namespace lmscale::ops
