// The boundary between ops/ and the fused cross-entropy kernels: plain params, no ATen, no CUDA
// headers. Per row i of the logits z (rows, V), target t_i (docs/spec.md §1, the loss in fp32), with
// label smoothing ε (PyTorch's label_smoothing: the target distribution is (1 − ε)·one-hot + ε/V):
//   forward   m_i = max_j z_ij,  l_i = log Σ_j exp(z_ij − m_i)  (one online pass);
//             loss_i = l_i − (z_i,t_i − m_i)   (differences first: exact where the logits are large)
//             with ε > 0: loss_i = (1 − ε)·(l_i − (z_i,t_i − m_i)) + ε·(l_i − (Σ_j z_ij / V − m_i))
//   backward  dz_ij = scale_i · (exp(z_ij − m_i − l_i) − (1 − ε)·[j = t_i] − ε/V),
//             scale_i = grad_loss[i · grad_loss_stride] · grad_factor
// A row whose target is ignore_index (PyTorch's, e.g. −100 for padding) has loss 0 and gradient 0.
// The forward reads each logit once and keeps two floats per row; the backward reads each logit
// once more and writes its gradient. Neither forms log-softmax or softmax of the batch in memory.
// Any other target outside [0, V) makes that row's loss NaN (checking on the host would need a sync).
#pragma once
#include <cstdint>

#include "kernels/fused_dtype.h"

namespace lmscale::kernels {

// No target equals it (targets are token ids or PyTorch's ignore_index): every row counts.
inline constexpr int64_t kNoIgnoreIndex = INT64_MIN;

struct CrossEntropyParams {
  const void* logits = nullptr;     // (rows, V), row stride logits_stride, dtype
  int64_t logits_stride = 0;
  const int64_t* targets = nullptr;  // (rows)
  float* loss_out = nullptr;         // forward: (rows)
  float* row_max = nullptr;          // forward writes, backward reads: m (rows)
  float* row_log_sum = nullptr;      // forward writes, backward reads: l (rows)
  const float* grad_loss = nullptr;  // backward: device memory, the gradient of the (reduced) loss
  int64_t grad_loss_stride = 0;      // backward: 0, one scalar for every row; 1, one per row (no reduction)
  float grad_factor = 1.f;           // backward: d(reduced loss)/d(loss_i), e.g. 1/rows for the mean
  int64_t ignore_index = kNoIgnoreIndex;  // rows with this target: loss 0, gradient 0
  float label_smoothing = 0.f;            // ε in [0, 1]
  void* dlogits_out = nullptr;       // backward: (rows, V), row stride logits_stride, dtype
  int64_t rows = 0, vocab = 0;
  FusedDtype dtype = FusedDtype::kBF16;
};

// Launch on `stream` (cudaStream_t as void*); throw std::runtime_error on a CUDA error.
void run_cross_entropy_fwd(const CrossEntropyParams& params, void* stream);
void run_cross_entropy_bwd(const CrossEntropyParams& params, void* stream);

}  // namespace lmscale::kernels
