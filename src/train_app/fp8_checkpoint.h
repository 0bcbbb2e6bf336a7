// What a checkpoint keeps of delayed FP8 scaling (--precision fp8 --fp8-scaling delayed), so that a
// resumed run takes the scales the uninterrupted one would have taken: the model's amax histories,
// the cached FP8 weights AdamW wrote with the previous scales, and whether each history is seeded.
// Which file holds them and when they are written is checkpoint.cpp's; the state itself is the model's.
#pragma once
#include <string>

#include "model/transformer.h"
#include "train_app/safetensors.h"

namespace lmscale {

// The model's delayed-scaling state as named tensors (empty under dynamic scaling, or without FP8):
//   fp8.histories             int32 (n, kFp8HistoryWords): TransformerLM::fp8_histories, the X and dY
//                             operands' rows (their amax so far in this step included)
//   fp8.histories.seeded      int32 0-d: whether the first step's roll seeded them
//   fp8.weight_histories      int32 (m, kFp8HistoryWords): TransformerLM::fp8_weight_histories
//   fp8.weight.K.data         the K-th cached FP8 weight's row-major bytes (e4m3), as AdamW wrote them
//   fp8.weight.K.inv_scale    fp32 0-d: the decode factor they were written with
//   fp8.weight.K.seeded       int32 0-d: whether its history is seeded
// Called between steps (the saved amax is what the step's roll will fold in).
NamedTensors fp8_state_tensors(TransformerLM& model);

// True when the model carries delayed-scaling state that fp8_state_tensors would save.
bool has_fp8_state(TransformerLM& model);

// Copies saved state into the model in place: every tensor keeps its address (the Linears, the
// optimizer's refresh of each FP8 weight and a captured CUDA graph hold them); the transposed FP8
// weights are rebuilt from the saved row-major bytes. Call after the weights and their bf16/FP8 copies
// were set up anew (TrainingStep::resync_weight_copies). Throws naming the tensor that is missing or
// has another shape (`file` names where the state came from).
void load_fp8_state(const SafetensorsContents& saved, TransformerLM& model, const std::string& file);

}  // namespace lmscale
