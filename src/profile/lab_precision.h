// Mixed-precision lab (docs/spec.md §2.3): (1) what the accumulator dtype does to a long sum of 0.01, and
// (2) which dtype each tensor of a toy model ends up in under fp16 / bf16 autocast. Pure
// experiments returning plain structs; the CLI (src/cli/lab.cpp) turns them into tables and JSONL.
#pragma once
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

namespace lmscale {

// One variant of "add `increment` to an accumulator `steps` times".
struct AccumulationResult {
  std::string variant;      // short id, e.g. "fp32+fp16->fp32"
  std::string accumulator;  // dtype of the running sum
  std::string increment;    // dtype of each added value as stored
  std::string added_as;     // dtype the increment has when it is added
  double value = 0;         // the final sum, read back as double
  double expected = 0;      // the value the CS336 handout quotes (0 when none)
};

// The four variants of the handout, in its order: fp32/fp32, fp16/fp16, fp32 acc + fp16 increments
// (promoted by the in-place add), fp32 acc + fp16 increments cast to fp32 first. ATen scalar
// tensors on the CPU, exactly as the assignment does it in PyTorch.
std::vector<AccumulationResult> run_accumulation(int64_t steps = 1000, double increment = 0.01);

// Dtypes observed in one forward + backward of fc1(in→10, no bias) → ReLU → LayerNorm(10) →
// fc2(10→out, no bias) → cross-entropy, with fp32 parameters, under autocast(device, dtype).
// When autocast (or a kernel) refuses the combination, `error` holds the reason and the dtype
// fields stay empty: the lab reports what happens instead of crashing.
struct AutocastDtypes {
  std::string device;    // "cpu" or "cuda:0"
  std::string autocast;  // "fp16" | "bf16"
  std::string params, fc1_out, relu_out, layernorm_out, logits, loss, grads;
  std::string error;
};

// Runs the toy model once; in_features/out_features/batch are small by default (the result does
// not depend on them). Deterministic given `seed`.
AutocastDtypes run_autocast_toy(c10::Device device, c10::ScalarType dtype, int64_t in_features = 20,
                                int64_t out_features = 5, int64_t batch = 8, uint64_t seed = 0);

}  // namespace lmscale
