// Delayed FP8 scaling (no amax pass), the ATen side: the amax histories of FP8 operands as int32 rows on
// the device (layout kernels/fp8_history_params.h), their roll at the end of a step, and the delayed cast in
// ATen ops (the CPU path, and the fallback where a producer kernel cannot write FP8 itself). Which
// operands use it, and when, is the model's choice (LinearImpl::fp8_amax_slot, TransformerLM).
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

#include "kernels/fp8_history_params.h"
#include "ops/fp8_amax.h"
#include "ops/fp8_quantize.h"

namespace lmscale::ops {

// One history row per entry of `formats` (Float8_e4m3fn or Float8_e5m2): int32 (n, kFp8HistoryWords)
// on `device`, each row as before any step (s = 1, no history).
at::Tensor new_fp8_histories(const std::vector<at::ScalarType>& formats, const at::Device& device);

// End of a step: kernels::fp8_history_roll on every row of `histories` ((n, kFp8HistoryWords) int32,
// contiguous): one kernel on CUDA (graph-safe, no host sync), a loop on the CPU.
void roll_fp8_histories(const at::Tensor& histories);

// A row's fields as tensors (views, no copy): the GEMM's decode factor 1/s (fp32, 0-d) and the scale
// s (fp32, 0-d), and the row as the kernels' struct (CUDA or CPU memory).
at::Tensor fp8_history_inv_scale(const at::Tensor& history);
at::Tensor fp8_history_scale(const at::Tensor& history);
kernels::Fp8History* fp8_history_ptr(const at::Tensor& history);

// max(history.amax, amax_bits) into history.amax (amax_bits: int32, one element, abs_bits of an
// amax): how a step that ran the dynamic path still feeds the history (the first step seeds it).
void fold_fp8_amax(const at::Tensor& history, const at::Tensor& amax_bits);

// x (rows, cols), bf16 or fp32, quantized with the history's scale s as the producer kernels do it
// under delayed scaling: q = fp8(x·s), saturating at ±max, NaN kept; x's amax maxed into the history,
// whose inv_scale turns NaN when x holds an inf or NaN. inv_scale of the result is a view of the
// history's. ATen ops on x's device, no host sync.
Fp8Tensor fp8_quantize_delayed(const at::Tensor& x, const at::Tensor& history, bool row_major, bool transposed);

// Delayed scaling, producer side: buffers for t's FP8 form in the format of `slot`'s history (t (..., cols)
// as rows of cols: row-major and transposed, as the FP8 Linear's casts write them), the decode factor a
// view of the history's, and `o` pointed at them for the producer kernel. t itself is only the tensor
// the producer hands on (Fp8Amax::record_quantized). `slot` must carry a history (attach_history).
Fp8Tensor fp8_delayed_outputs(const Fp8AmaxSlot& slot, const at::Tensor& t, kernels::Fp8DelayedOut& o);

// A weight whose row-major FP8 bytes (w.data) the AdamW kernel wrote with the history's scale,
// finished after its update: w.data_t = its transpose, w.inv_scale = the decode factor it was written
// with (the history's, NaN if AdamW stored an inf or NaN), then the history rolled for the next update.
// One kernel on CUDA (kernels::run_fp8_weight_finish), ATen ops elsewhere.
void fp8_weight_finish(Fp8Tensor& w, const at::Tensor& history);

}  // namespace lmscale::ops
