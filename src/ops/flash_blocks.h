// Masks the CUDA kernels cannot apply yet, run on them as blocks they can: the plan (square_kernel_blocks, a
// pure function) and its forward and backward executors, device-agnostic in ATen. flash_attention.cpp calls
// them with the kernels; the tests call them on CPU with the reference standing in for the kernels.
//
// Note [square kernel blocks]. The kernels serve equal head counts and no mask or the square causal one.
// Until they take a mask's offset themselves (issue 40), a causal mask whose diagonal is not the square's
// (Nq != Nk in either alignment; a window bounded on the right only) runs as blocks that each are full or
// square causal. With query i's last visible key at i + d:
//   rows [0, a)   see no key (O = 0, L = +inf)                                    a = clamp(-d, 0, Nq)
//   rows [a, b)   keys [0, a + d) in full, keys [a + d, b + d) square causal      b = clamp(Nk - d, a, Nq)
//   rows [b, Nq)  every key, in full
// Blocks sharing rows are merged through their logsumexps (L = log Σ_b e^(L_b), O = Σ_b e^(L_b - L) O_b);
// the backward runs each block with the merged O and L, which is exact (P = exp(S - L) and
// D = rowsum(dO ⊙ O) are the whole row's), and adds the blocks' dQ, dK, dV in fp32. Grouped K/V heads are
// repeated for the kernels (repeat_interleave, as SDPA's enable_gqa) and dK, dV summed back over each group.
// One block covering everything is one kernel call, as before this plan existed.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <tuple>
#include <vector>

#include "ops/flash_reference.h"

namespace lmscale::ops {

struct FlashBlock {
  int64_t q0, nq, k0, nk;  // rows [q0, q0 + nq) x keys [k0, k0 + nk)
  bool causal;             // square (nq == nk) top-left causal, or full
};

// The blocks of `mask` at (nq, nk), in row order, or nullopt when there are none: a window bounded on the left
// that hides some key. A bound that hides nothing is dropped first (a window wider than the keys, a causal
// diagonal past the last key), so those run as one kernel call.
std::optional<std::vector<FlashBlock>> square_kernel_blocks(const FlashMask& mask, int64_t nq, int64_t nk);

// The kernels' contract, as the executors call them: equal head counts; causal only on a square.
using SquareForward = std::function<std::tuple<at::Tensor, at::Tensor>(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, double scale)>;
using SquareBackward = std::function<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o, const at::Tensor& L,
    const at::Tensor& dout, bool causal, double scale)>;

// Dense q (..., Hq, Nq, D) with k, v (..., Hkv, Nk, D) through `run`, block by block. Returns what the op
// returns: (O like q, L (..., Hq, Nq)) and (dQ, dK, dV) in the input dtype.
std::tuple<at::Tensor, at::Tensor> forward_by_blocks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                     const std::vector<FlashBlock>& blocks, double scale,
                                                     const SquareForward& run);
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_by_blocks(const at::Tensor& q, const at::Tensor& k,
                                                                  const at::Tensor& v, const at::Tensor& o,
                                                                  const at::Tensor& L, const at::Tensor& dout,
                                                                  const std::vector<FlashBlock>& blocks, double scale,
                                                                  const SquareBackward& run);

}  // namespace lmscale::ops
