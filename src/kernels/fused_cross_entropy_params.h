// The boundary between ops/ and the fused cross-entropy kernels: plain params, no ATen, no CUDA
// headers. Per row i of the logits z (rows, V), target t_i (docs/spec.md §1, the loss in fp32):
//   forward   m_i = max_j z_ij,  l_i = log Σ_j exp(z_ij − m_i)  (one online pass);
//             loss_i = l_i − (z_i,t_i − m_i)   (differences first: exact where the logits are large)
//   backward  dz_ij = scale · (exp(z_ij − m_i − l_i) − [j = t_i]),  scale = *grad_loss · grad_factor
// The forward reads each logit once and keeps two floats per row; the backward reads each logit
// once more and writes its gradient. Neither forms log-softmax or softmax of the batch in memory.
// A target outside [0, V) makes that row's loss NaN (checking on the host would need a sync).
#pragma once
#include <cstdint>

#include "kernels/fused_dtype.h"

namespace lmscale::kernels {

struct CrossEntropyParams {
  const void* logits = nullptr;     // (rows, V), row stride logits_stride, dtype
  int64_t logits_stride = 0;
  const int64_t* targets = nullptr;  // (rows)
  float* loss_out = nullptr;         // forward: (rows)
  float* row_max = nullptr;          // forward writes, backward reads: m (rows)
  float* row_log_sum = nullptr;      // forward writes, backward reads: l (rows)
  const float* grad_loss = nullptr;  // backward: one device scalar, the gradient of the reduced loss
  float grad_factor = 1.f;           // backward: d(reduced loss)/d(loss_i), e.g. 1/rows for the mean
  void* dlogits_out = nullptr;       // backward: (rows, V), row stride logits_stride, dtype
  int64_t rows = 0, vocab = 0;
  FusedDtype dtype = FusedDtype::kBF16;
};

// Launch on `stream` (cudaStream_t as void*); throw std::runtime_error on a CUDA error.
void run_cross_entropy_fwd(const CrossEntropyParams& params, void* stream);
void run_cross_entropy_bwd(const CrossEntropyParams& params, void* stream);

}  // namespace lmscale::kernels
