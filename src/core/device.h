// Device and dtype helpers: parse user strings, detect the GPU, its dense bf16 peak (for MFU),
// synchronize, and read/reset the caching allocator's memory statistics. CPU-safe everywhere.
#pragma once
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lmscale {

// "auto" → cuda:0 if a GPU is visible, else cpu; otherwise "cpu", "cuda", "cuda:N".
// Throws with the list of accepted values, or when CUDA is asked for on a machine without one.
c10::Device resolve_device(const std::string& spec);

// "fp32" | "bf16" | "fp16" | "fp64" (also "float32", "bfloat16", ...) | "fp8". "fp8" names the
// training precision of FP8 GEMMs under bf16 autocast (StepSetup::precision), held as Float8_e4m3fn.
c10::ScalarType parse_dtype(const std::string& name);
std::string dtype_name(c10::ScalarType t);

// Human name of the device ("NVIDIA H100 80GB HBM3", or "cpu").
std::string device_name(const c10::Device& d);

// Dense (no sparsity) bf16 tensor-core peak in FLOP/s, from a table of known GPUs; 0 if unknown
// (MFU is then reported as null rather than guessed).
double dense_bf16_peak_flops(const std::string& gpu_name);

void synchronize(const c10::Device& d);

// ---- Can this build's CUDA kernels run on a GPU? (checked before the first kernel launch)
// Machine code for sm_XY runs on compute capability X.Z with Z >= Y (same major); the PTX of the
// newest built architecture is compiled by the driver for any newer GPU.
struct KernelSupport {
  bool runs = false;
  std::string how;      // "sm_86 machine code" | "PTX of sm_90, compiled by the driver at first use"
  std::string message;  // when !runs: the GPU, its capability, what was built, and the fix
};
// Architectures the kernels were built for (LMSCALE_CUDA_ARCHS as numbers, e.g. {80, 86, 89, 90});
// empty in a build without kernels.
std::vector<int> built_cuda_archs();
KernelSupport kernel_support(const std::string& gpu_name, int major, int minor, const std::vector<int>& built);
// Compute capability of a visible GPU as {major, minor}; {0, 0} without CUDA.
std::pair<int, int> cuda_capability(int device_index);
// Throws KernelSupport::message when this build's kernels cannot run on the device's GPU. Cheap
// after the first call per device (the answer is cached).
void check_kernels_run_on(const c10::Device& d);

struct MemoryStats {
  int64_t allocated = 0;       // bytes held by live tensors now
  int64_t peak_allocated = 0;  // high-water mark since the last reset
  int64_t reserved = 0;        // bytes the caching allocator holds from the driver
};
// All zeros on CPU (the CPU allocator keeps no statistics).
MemoryStats memory_stats(const c10::Device& d);
void reset_peak_memory(const c10::Device& d);
// Returns cached blocks to the driver: called after an OOM so the next config starts clean.
void release_cached_memory(const c10::Device& d);

}  // namespace lmscale
