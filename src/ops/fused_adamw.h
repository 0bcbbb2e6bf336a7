// The bridge to the multi-tensor AdamW kernel (src/kernels/fused_adamw.cu) and its fp64 reference.
// Lists are parallel: params[i], grads[i], exp_avgs[i], exp_avg_sqs[i] and, where defined,
// bf16_copies[i] (written with the updated weight; undefined entries are skipped).
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

namespace lmscale::ops {

struct AdamWHyperparams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};

// True when this build has the kernel (compiled with nvcc). The kernel itself needs a CUDA device.
bool fused_adamw_available();

// Whether fused_adamw_step can take these lists: CUDA, fp32, contiguous, matching sizes, one device
// (bf16 copies: bf16, contiguous, the param's size). Says why not in `why` when it returns false.
bool fused_adamw_accepts(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                         const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                         const std::vector<at::Tensor>& bf16_copies, std::string* why = nullptr);

// Advances `step` (an fp32 scalar on the params' device) by one (unless advance_step is false: a
// step whose params are updated one by one advances it once), then updates every tensor in place, a
// few launches in all, on the current stream: capturable in a CUDA graph. Throws on bad lists.
void fused_adamw_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                      const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                      const std::vector<at::Tensor>& bf16_copies, const at::Tensor& step,
                      const AdamWHyperparams& hyper, bool advance_step = true);

// The same step, and for each defined amax_slots[i] (int32, one element, with a defined bf16 copy)
// an atomic max of |copy| into it as float bits (kernels/fp8_scale.h): the FP8 weights' amax taken
// in the update's own pass. Slots are not zeroed here (several params may share one).
void fused_adamw_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                      const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                      const std::vector<at::Tensor>& bf16_copies, const std::vector<at::Tensor>& amax_slots,
                      const at::Tensor& step, const AdamWHyperparams& hyper, bool advance_step = true);

// Delayed FP8 scaling of a weight (ops/fp8_history.h): the param's rows of the row-major FP8 weight
// (`rows`, numel equal to the param's, contiguous) and the weight's history row.
struct AdamWFp8Out {
  at::Tensor history;
  at::Tensor rows;
};

// The same step, and where fp8_out[i].history is defined (with a bf16 copy) the updated copy's FP8
// bytes into fp8_out[i].rows with the history's scale and max |copy| into the history (amax_slots[i]
// unused then). fp8_out empty or one entry per param.
void fused_adamw_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                      const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                      const std::vector<at::Tensor>& bf16_copies, const std::vector<at::Tensor>& amax_slots,
                      const std::vector<AdamWFp8Out>& fp8_out, const at::Tensor& step, const AdamWHyperparams& hyper,
                      bool advance_step = true);

// The same step computed in fp64 on any device (the test oracle) from the hyperparameters rounded
// to fp32, as the kernel and ATen hold them: advances `step`, updates params and moments in place
// (rounded to their dtype once), and writes the bf16 copies.
void adamw_reference_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                          const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                          const std::vector<at::Tensor>& bf16_copies, const at::Tensor& step,
                          const AdamWHyperparams& hyper);

}  // namespace lmscale::ops
