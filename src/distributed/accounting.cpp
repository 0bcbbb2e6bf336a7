// Parallelism accounting arithmetic; see accounting.h.
//
// Note [FSDP x TP compute bound]
// Forward of one block (two matmuls, B tokens in the whole mesh, N = X·Y devices), following the
// TPU Scaling Book's FSDP+TP analysis:
//   T_math = 4·B·D·F / (N·C)                     2 matmuls × 2·B·D·F FLOPs, split over N devices
//   T_fsdp = 4·D·F / (Y·W·M_X)                   all-gather of both bf16 weight shards along X
//   T_tp   = 4·B·D / (X·W·M_Y)                   bf16 activations gathered/reduced along Y
// Compute-bound when T_math ≥ T_fsdp + T_tp. With b = B/N (per-device batch) and N/X = Y:
//   b·F/C ≥ F/(Y·W·M_X) + b·Y/(W·M_Y)   ⇒   b ≥ [F/(Y·W·M_X)] / [F/C − Y/(W·M_Y)].
#include "distributed/accounting.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <limits>

namespace lmscale::distributed {

AccountingResult account(const AccountingInputs& in) {
  TORCH_CHECK(in.d_model > 0 && in.d_ff > 0 && in.blocks > 0, "account: --d-model, --d-ff and --blocks must be positive.");
  TORCH_CHECK(in.fsdp_devices >= 1 && in.fsdp_x >= 1 && in.tp_y >= 1, "account: device counts must be >= 1.");
  TORCH_CHECK(in.ici_bandwidth > 0 && in.flops > 0 && in.m_x > 0 && in.m_y > 0 && in.device_memory > 0,
              "account: bandwidth, FLOP/s, link counts and device memory must be positive.");
  const double inf = std::numeric_limits<double>::infinity();
  AccountingResult r;
  r.params = 2 * in.d_model * in.d_ff * in.blocks;
  r.weights_fp32 = 4 * r.params;
  r.grads_fp32 = 4 * r.params;
  r.adam_fp32 = 8 * r.params;  // first and second moments
  r.training_state = r.weights_fp32 + r.grads_fp32 + r.adam_fp32;
  // Saved for backward per token: the input of W1 (d_model) and the input of W2 (d_ff), bf16.
  r.activations_per_token_bf16 = in.blocks * (in.d_model + in.d_ff) * 2;
  r.activations_bf16 = r.activations_per_token_bf16 * in.tokens;
  // FSDP shards the training state and half of the activations (every second layer).
  const double sharded = r.training_state + r.activations_bf16 / 2, kept = r.activations_bf16 / 2;
  r.fsdp_per_device = sharded / in.fsdp_devices + kept;
  r.fsdp_devices_to_fit = kept >= in.device_memory ? inf : std::ceil(sharded / (in.device_memory - kept));
  const double W = in.ici_bandwidth, C = in.flops, X = in.fsdp_x, Y = in.tp_y, F = in.d_ff;
  r.t_math_per_token = 4 * in.d_model * F / C;
  const double denom = F / C - Y / (W * in.m_y);
  r.compute_bound_batch_per_device = denom <= 0 ? inf : (F / (Y * W * in.m_x)) / denom;
  r.compute_bound_batch_total = r.compute_bound_batch_per_device * X * Y;
  return r;
}

}  // namespace lmscale::distributed
