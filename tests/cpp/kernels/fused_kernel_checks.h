// Shared by the fused-kernel tests: the error measure and the poisoning of the CUDA allocator's cache.
#pragma once
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace lmscale::testing {

// max |a − b| / max |b|, in fp64 on the CPU: the error relative to the tensor's scale.
inline double max_rel(const torch::Tensor& a, const torch::Tensor& b) {
  auto x = a.detach().to(torch::kDouble).cpu(), y = b.detach().to(torch::kDouble).cpu();
  return (x - y).abs().max().item<double>() / std::max(1e-300, y.abs().max().item<double>());
}

// Fills blocks of many sizes with NaN and hands them back to the caching allocator, so the next
// outputs a kernel gets are likely NaN-filled memory: an element the kernel forgets to write shows.
inline void poison_cuda_cache() {
  std::vector<torch::Tensor> blocks;
  for (int64_t bytes = 512; bytes <= (int64_t{8} << 20); bytes *= 2)
    for (int i = 0; i < 4; ++i)
      blocks.push_back(torch::full({bytes / 4}, NAN, torch::TensorOptions().device(torch::kCUDA)));
  torch::cuda::synchronize();
}

}  // namespace lmscale::testing
