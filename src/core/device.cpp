// Device and dtype helpers; see device.h.
#include "core/device.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>

#ifdef LMSCALE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <cctype>
#include <utility>
#include <vector>

namespace lmscale {

c10::Device resolve_device(const std::string& spec) {
  if (spec == "auto") return torch::cuda::is_available() ? c10::Device("cuda:0") : c10::Device("cpu");
  TORCH_CHECK(spec == "cpu" || spec.rfind("cuda", 0) == 0, "--device '", spec,
              "' is not understood: use auto, cpu, cuda or cuda:N");
  c10::Device d(spec);
  if (d.is_cuda()) {
    TORCH_CHECK(torch::cuda::is_available(), "--device ", spec,
                " asked for CUDA but no GPU is visible here; use --device cpu (or auto)");
    TORCH_CHECK(!d.has_index() || d.index() < static_cast<int>(torch::cuda::device_count()),
                "--device ", spec, ": only ", torch::cuda::device_count(), " GPU(s) visible");
    if (!d.has_index()) d = c10::Device(c10::DeviceType::CUDA, 0);
  }
  return d;
}

c10::ScalarType parse_dtype(const std::string& raw) {
  std::string n = raw;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  if (n == "fp32" || n == "float32" || n == "float") return c10::kFloat;
  if (n == "bf16" || n == "bfloat16") return c10::kBFloat16;
  if (n == "fp16" || n == "float16" || n == "half") return c10::kHalf;
  if (n == "fp64" || n == "float64" || n == "double") return c10::kDouble;
  TORCH_CHECK(false, "dtype '", raw, "' is not understood: use fp32, bf16, fp16 or fp64");
}

std::string dtype_name(c10::ScalarType t) {
  switch (t) {
    case c10::kFloat: return "fp32";
    case c10::kBFloat16: return "bf16";
    case c10::kHalf: return "fp16";
    case c10::kDouble: return "fp64";
    default: return c10::toString(t);
  }
}

std::string device_name(const c10::Device& d) {
#ifdef LMSCALE_CUDA
  if (d.is_cuda()) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d.index()) == cudaSuccess) return p.name;
  }
#endif
  return d.is_cuda() ? "cuda" : "cpu";
}

double dense_bf16_peak_flops(const std::string& gpu) {
  // Vendor datasheet dense bf16 rates (no 2:4 sparsity). SXM parts; PCIe parts are slower.
  static const std::vector<std::pair<std::string, double>> table = {
      {"H100 PCIe", 756e12}, {"H100", 989e12}, {"H200", 989e12}, {"H800", 989e12},
      {"GH200", 989e12},     {"B200", 2250e12}, {"A100", 312e12}, {"A10G", 125e12},
      {"L40S", 362e12},      {"L4", 121e12},    {"RTX 4090", 165e12}};
  for (const auto& [key, flops] : table)
    if (gpu.find(key) != std::string::npos) return flops;
  return 0.0;
}

void synchronize(const c10::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize(d.index());
}

MemoryStats memory_stats(const c10::Device& d) {
  MemoryStats m;
#ifdef LMSCALE_CUDA
  if (d.is_cuda()) {
    auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(d.index());
    constexpr auto kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    m.allocated = s.allocated_bytes[kAll].current;
    m.peak_allocated = s.allocated_bytes[kAll].peak;
    m.reserved = s.reserved_bytes[kAll].current;
  }
#endif
  return m;
}

void reset_peak_memory(const c10::Device& d) {
#ifdef LMSCALE_CUDA
  if (d.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(d.index());
#endif
}

void release_cached_memory(const c10::Device& d) {
#ifdef LMSCALE_CUDA
  if (d.is_cuda()) {
    synchronize(d);
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
#endif
}

}  // namespace lmscale
