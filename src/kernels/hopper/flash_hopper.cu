// Host side of the sm_90a FlashAttention path: whether it applies, the TMA tensor maps, the launch.
#include "kernels/hopper/flash_hopper.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <mutex>
#include <stdexcept>

#include "kernels/cuda_check.h"
#include "kernels/flash_head_dims.h"
#include "kernels/flash_sequence.cuh"
#include "kernels/sm_count.h"
#include "kernels/hopper/flash_bwd_hopper.cuh"  // BwdShipped
#include "kernels/hopper/flash_fwd_hopper.cuh"  // FwdShipped, FwdShort
#include "kernels/hopper/flash_hopper_tiles.h"

namespace lmscale::kernels::hopper {

template <typename C>
bool launch_fwd(const FlashParams& p, cudaStream_t stream);
template <typename C>
bool launch_bwd(const FlashParams& p, cudaStream_t stream);

namespace {

// False when the head dim has no Hopper kernel or TMA cannot describe q/k/v.
template <typename T>
bool fwd_for_dtype(const FlashParams& p, cudaStream_t stream) {
  bool ran = false;
  with_head_dim(HopperHeadDims{}, p.head_dim, [&](auto d) {
    constexpr int D = decltype(d)::value;
    if constexpr (fwd_has_short_tile(D)) {
      // A packed batch's mean sequence (the offsets stay on the device).
      const int keys_per_sequence = flash_varlen(p) ? p.total_k / (p.batch > 0 ? p.batch : 1) : p.seqlen_k;
      if (fwd_takes_short_tile(D, p.is_causal, keys_per_sequence)) {
        ran = launch_fwd<FwdShort<T, D>>(p, stream);
        return;
      }
    }
    ran = launch_fwd<FwdShipped<T, D>>(p, stream);
  });
  return ran;
}

bool fwd_dispatch(const FlashParams& p, cudaStream_t stream) {
  return p.dtype == FlashDtype::kBF16 ? fwd_for_dtype<__nv_bfloat16>(p, stream) : fwd_for_dtype<__half>(p, stream);
}

template <typename T>
bool bwd_for_dtype(const FlashParams& p, cudaStream_t stream) {
  bool ran = false;
  with_head_dim(HopperHeadDims{}, p.head_dim,
                [&](auto d) { ran = launch_bwd<BwdShipped<T, decltype(d)::value>>(p, stream); });
  return ran;
}

// sm_90a code runs on compute capability 9.0 only (not on later archs): asked once per device.
bool device_is_sm90() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  static std::mutex mu;
  static int cached[64] = {};  // 0 unknown, 1 yes, 2 no
  std::lock_guard<std::mutex> lock(mu);
  if (dev < 0 || dev >= 64) return false;
  if (cached[dev] == 0) {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    cached[dev] = major == 9 && minor == 0 ? 1 : 2;
  }
  return cached[dev] == 1;
}

// TMA addresses global memory in 16-byte units: base pointers and every stride of a dimension that is
// walked (size > 1) must be 16-byte multiples. flash_params.h already asks rows to start 16-byte aligned.
bool tma_describable(const void* ptr, FlashRowsView view, int64_t row, int64_t head, int64_t batch) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && (view.rows == 1 || row % 8 == 0) &&
         (view.heads == 1 || head % 8 == 0) && (view.batch == 1 || batch % 8 == 0);
}

// Calls f(row, head, column) for every pair of 16-bit elements (the head dims are even) of a packed batch's rows in no
// sequence: the rows from the last offset `cu[batch]` (read on the device, so the host never synchronises on it) to
// `total`, `heads` heads each; none for a batch that fills its rows. A grid-stride loop.
template <typename F>
__device__ __forceinline__ void for_each_pair_past_offsets(const int* cu, int batch, int total, int heads, int head_dim,
                                                           F&& f) {
  const int row0 = cu[batch], pairs = head_dim / 2;
  const int64_t rows = static_cast<int64_t>(total - row0) * heads;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * pairs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t rh = i / pairs;
    f(row0 + rh / heads, static_cast<int>(rh % heads), static_cast<int>(i - rh * pairs) * 2);
  }
}

// A packed batch's rows in no sequence (past the last offset): O = 0, L = +inf (flash_fwd_writes_every_row), so the
// op allocates O and L without filling them (zeroing all of O cost ~10 us at 16k x 16 x 64).
__global__ void fill_rows_past_offsets(const FlashParams p) {
  for_each_pair_past_offsets(p.cu_seqlens_q, p.batch, p.total_q, p.heads, p.head_dim, [&](int64_t row, int h, int c) {
    auto* o = static_cast<uint16_t*>(p.o) + row * p.o_row_stride + h * p.o_head_stride + c;
    *reinterpret_cast<uint32_t*>(o) = 0u;
    if (c == 0) p.lse[h * static_cast<int64_t>(p.total_q) + row] = INFINITY;
  });
}

// The same for dK and dV (flash_bwd_writes_every_key_row): the key rows past the last offset are zeros, so the op
// allocates dK and dV without zeroing them (zeroing both cost ~22 us at 16k x 16 x 64, 3 % of a packed fwd + bwd).
// The backward writes every key row inside a sequence, those no query sees included, as in a dense batch.
__global__ void zero_key_rows_past_offsets(const FlashParams p) {
  for_each_pair_past_offsets(p.cu_seqlens_k, p.batch, p.total_k, flash_heads_k(p), p.head_dim,
                             [&](int64_t row, int h, int c) {
                               const int64_t at = row * p.dk_row_stride + h * p.dk_head_stride + c;
                               *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(p.dk) + at) = 0u;
                               *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(p.dv) + at) = 0u;
                             });
}

}  // namespace

std::string fwd_unsupported_reason(const FlashParams& p) {
  if (!HopperHeadDims::contains(p.head_dim))
    return "head_dim " + std::to_string(p.head_dim) + " has no Hopper kernel; supported: " + HopperHeadDims::str();
  if (!device_is_sm90()) return "the current device is not sm_90 (the kernels are sm_90a code)";
  const FlashRowsView qv = flash_q_view(p), kv = flash_k_view(p);
  if (!tma_describable(p.q, qv, p.q_row_stride, p.q_head_stride, p.q_batch_stride) ||
      !tma_describable(p.k, kv, p.k_row_stride, p.k_head_stride, p.k_batch_stride) ||
      !tma_describable(p.v, kv, p.v_row_stride, p.v_head_stride, p.v_batch_stride))
    return "q/k/v base addresses or strides are not 16-byte multiples, which TMA needs";
  return {};
}

std::string bwd_unsupported_reason(const FlashParams& p) {
  std::string why = fwd_unsupported_reason(p);
  if (!why.empty()) return why;
  if (!tma_describable(p.dout, flash_q_view(p), p.do_row_stride, p.do_head_stride, p.do_batch_stride))
    return "dout's base address or strides are not 16-byte multiples, which TMA needs";
  return {};
}

void run_bwd(const FlashParams& p, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const bool ran = p.dtype == FlashDtype::kBF16 ? bwd_for_dtype<__nv_bfloat16>(p, s) : bwd_for_dtype<__half>(p, s);
  if (!ran) {
    const std::string why = bwd_unsupported_reason(p);
    throw std::runtime_error("run_flash_bwd (hopper): " + (why.empty() ? "cuTensorMapEncodeTiled rejected q/k/v/dout" : why));
  }
  if (flash_varlen(p) && p.total_k > 0) {
    zero_key_rows_past_offsets<<<current_sm_count(), 256, 0, s>>>(p);
    LMSCALE_CUDA_CHECK(cudaGetLastError());
  }
}

void run_fwd(const FlashParams& p, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (!fwd_dispatch(p, s)) {
    const std::string why = fwd_unsupported_reason(p);
    throw std::runtime_error("run_flash_fwd (hopper): " + (why.empty() ? "cuTensorMapEncodeTiled rejected q/k/v" : why));
  }
  if (flash_varlen(p) && p.total_q > 0) {
    fill_rows_past_offsets<<<current_sm_count(), 256, 0, s>>>(p);
    LMSCALE_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace lmscale::kernels::hopper
