// Which windows of a token file a training run reads, as pure functions of the seed and the step:
// the same seed gives the same batches in the same order on any machine, after a restart, and for
// the PyTorch reference (which is handed these positions, never samples its own). Turning windows
// into (inputs, targets) tensors is batch_of()'s job.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

#include "train_app/token_file.h"

namespace lmscale {

// splitmix64 (Steele, Lea, Flood 2014): a fixed, portable 64-bit mix. std::uniform_int_distribution
// is not specified bit for bit across standard libraries, so the order is built from this alone.
uint64_t splitmix64(uint64_t x);

// The window starts of training step `step` (0-based), one per row of the batch: uniform over
// [0, n_tokens - context - 1] (the window and its next-token targets fit), independent per
// (seed, step, row). Throws when the file is shorter than context + 1 tokens.
std::vector<int64_t> train_window_starts(uint64_t seed, int64_t step, int64_t batch, int64_t n_tokens,
                                         int64_t context);

// `count` validation windows spread evenly over the file, first at 0, last ending at its end (they
// overlap when the file is short): every evaluation of every run reads the same tokens.
std::vector<int64_t> validation_window_starts(int64_t count, int64_t n_tokens, int64_t context);

// Inputs and targets of the windows at `starts`: (B, T) int64 tensors on `device`, targets shifted by
// one token (the next-token targets).
struct Batch {
  at::Tensor inputs, targets;
};
Batch batch_of(const TokenFile& file, const std::vector<int64_t>& starts, int64_t context, c10::Device device);

}  // namespace lmscale
