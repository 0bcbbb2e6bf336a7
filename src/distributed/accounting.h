// Parallelism accounting (docs/spec.md §2.10, the "XXL" model): bytes of FP32 training state vs BF16
// activations, per-device memory under FSDP and the device count that fits, and the per-device
// batch at which an FSDP × TP forward pass becomes compute-bound (TPU Scaling Book model).
// Pure arithmetic; `lmscale account` (src/cli/account.cpp) prints it.
#pragma once
#include <cstdint>

namespace lmscale::distributed {

struct AccountingInputs {
  double d_model = 16384, d_ff = 53248, blocks = 126;  // each block: W1 (d_model→d_ff), W2 (d_ff→d_model)
  double tokens = 1;                // tokens whose activations are saved for backward
  double fsdp_devices = 16;         // N for the FSDP-only question
  double device_memory = 95e9;      // bytes per device (TPU v5p: 95 GB)
  double fsdp_x = 16, tp_y = 4;     // mesh axes for the FSDP × TP question
  double ici_bandwidth = 2 * 9e10;  // W_ici, bytes/s per link direction pair
  double flops = 4.6e14;            // C, FLOP/s per device (bf16)
  double m_x = 2, m_y = 1;          // links along each axis (3D mesh)
};

struct AccountingResult {
  double params = 0;                // 2 · d_model · d_ff · blocks
  double weights_fp32 = 0, grads_fp32 = 0, adam_fp32 = 0, training_state = 0;  // bytes
  double activations_per_token_bf16 = 0, activations_bf16 = 0;                 // bytes
  double fsdp_per_device = 0;       // (state + acts/2)/N + acts/2
  double fsdp_devices_to_fit = 0;   // smallest N with fsdp_per_device <= device_memory (inf if none)
  double t_math_per_token = 0;      // see Note [FSDP x TP compute bound] in accounting.cpp
  double compute_bound_batch_per_device = 0;  // tokens (inf if TP traffic alone outruns compute)
  double compute_bound_batch_total = 0;
};

AccountingResult account(const AccountingInputs& in);

}  // namespace lmscale::distributed
