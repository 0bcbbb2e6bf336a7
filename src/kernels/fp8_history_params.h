// Delayed FP8 scaling (no amax pass): one operand's amax history in device memory, the roll that folds a
// step's amax into it and derives the next step's scale, and what a producer kernel that writes the
// operand in FP8 itself is handed. The scale rule is fp8_scale.h's. Plain structs, no ATen, no CUDA.
#pragma once
#include <cstdint>

#include "kernels/fp8_scale.h"

namespace lmscale::kernels {

// Steps of amax an operand's scale looks back over. Transformer Engine's default is 1024 with "max";
// 16 is enough to cover a step's worth of noise in the amax and short enough that a shrinking operand
// regains its precision within a few steps (docs/training_step_notes.md, delayed scaling).
constexpr int kFp8HistoryLen = 16;

// One operand's state, an int32 row of kFp8HistoryWords (ops/fp8_history.h). Producers read `scale`
// and atomicMax `amax`; the GEMMs read `inv_scale`; only the roll writes the rest. inv_scale comes
// first and a row is 128 bytes, so the GEMM's scale pointer is 128-byte aligned like a fresh tensor's
// (cuBLASLt refused a scale 8 bytes past a 16-byte boundary: CUBLAS_STATUS_NOT_SUPPORTED on an H100).
struct Fp8History {
  float inv_scale;  // 1/scale, the GEMMs' decode factor; NaN once a producer stored inf or NaN this step
  float scale;      // fp8_scale_from_amax(max of amax_history): this step's s
  uint32_t amax;    // abs_bits of this step's amax so far (0 after a roll)
  uint32_t format;  // Fp8Format of the operand
  uint32_t unused[12];
  uint32_t amax_history[kFp8HistoryLen];  // abs_bits of the amax of the last steps, newest first
};
constexpr int kFp8HistoryWords = 32;
static_assert(sizeof(Fp8History) == kFp8HistoryWords * sizeof(uint32_t), "Fp8History is an int32 row");

// 1/s for a scale from fp8_scale_from_amax (a power of two, or NaN), exact and the same bits on the
// host and the device: built from s's exponent, not divided (the kernels build with fast math, whose
// reciprocal turns a NaN into another NaN's bits).
LMSCALE_HD inline float fp8_inv_scale(float s) {
  if (s != s) return s;
  int k = 0;
  (void)frexpf(s, &k);  // s = 0.5·2^k
  return ldexpf(1.f, 1 - k);
}

// The state of an operand before any step: no history, s = 1.
LMSCALE_HD inline Fp8History fp8_history_init(Fp8Format f) {
  Fp8History h{};
  h.scale = h.inv_scale = 1.f;
  h.format = static_cast<uint32_t>(f);
  return h;
}

// End of a step: this step's amax becomes the newest entry (the oldest drops out), `amax` restarts at
// 0, and the next step's scale is the rule applied to the history's max. A NaN or inf amax stays in
// the history for kFp8HistoryLen steps and keeps the scale NaN (the loss is NaN then anyway, as with
// dynamic scaling). Whether the history is full does not matter: empty entries are 0 and lose the max.
LMSCALE_HD inline void fp8_history_roll(Fp8History& h) {
  uint32_t m = h.amax;
  for (int i = kFp8HistoryLen - 1; i > 0; --i) {
    h.amax_history[i] = h.amax_history[i - 1];
    m = m > h.amax_history[i] ? m : h.amax_history[i];
  }
  h.amax_history[0] = h.amax;
  h.amax = 0;
  h.scale = fp8_scale_from_amax(float_from_bits(m), static_cast<Fp8Format>(h.format));
  h.inv_scale = fp8_inv_scale(h.scale);
}

// What a producer kernel writes an FP8 operand to under delayed scaling: q = fp8(v·s) of each stored
// value v (v rounded to the producer's output dtype first, so the bytes equal a cast of the stored
// tensor with the same s), saturating at ±max (an amax past the delayed scale clips for a step). The
// kernel maxes |v| into history->amax and, when it stores an inf or NaN, sets history->inv_scale to
// NaN so the GEMM that reads the operand outputs NaN (never a silently saturated value; fp8_scale.h).
struct Fp8DelayedOut {
  Fp8History* history = nullptr;  // null: no FP8 output
  void* data = nullptr;           // (rows, cols) row-major FP8
  void* data_t = nullptr;         // (cols, rows) row-major FP8 (the transpose), or null
};

// Rolls `n` histories, one thread each, on `stream` (cudaStream_t as void*): one node of the step's
// CUDA graph, no host sync. Throws std::runtime_error on a CUDA error.
void run_fp8_history_roll(Fp8History* histories, int64_t n, void* stream);

}  // namespace lmscale::kernels
