// Device and dtype helpers; see device.h.
#include "core/device.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>

#ifdef LMSCALE_CUDA
#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>
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
  if (n == "fp8") return c10::kFloat8_e4m3fn;
  TORCH_CHECK(false, "dtype '", raw, "' is not understood: use fp32, bf16, fp16, fp64 or fp8");
}

std::string dtype_name(c10::ScalarType t) {
  switch (t) {
    case c10::kFloat: return "fp32";
    case c10::kBFloat16: return "bf16";
    case c10::kHalf: return "fp16";
    case c10::kDouble: return "fp64";
    case c10::kFloat8_e4m3fn: return "fp8";
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

#ifndef LMSCALE_CUDA_ARCHS
#define LMSCALE_CUDA_ARCHS ""  // set by CMake on this file: the kernel architectures, comma list
#endif

std::vector<int> built_cuda_archs() {
  std::vector<int> archs;
  const std::string csv = LMSCALE_CUDA_ARCHS;
  size_t start = 0;
  while (start < csv.size()) {
    size_t end = csv.find(',', start);
    if (end == std::string::npos) end = csv.size();
    if (end > start) archs.push_back(std::stoi(csv.substr(start, end - start)));
    start = end + 1;
  }
  return archs;
}

KernelSupport kernel_support(const std::string& gpu_name, int major, int minor, const std::vector<int>& built) {
  KernelSupport k;
  const int cc = major * 10 + minor;
  std::string list;
  int newest = 0;
  int best = 0;  // the driver loads the newest machine code the GPU can run
  for (int a : built) {
    list += (list.empty() ? "sm_" : ", sm_") + std::to_string(a);
    newest = std::max(newest, a);
    if (a / 10 == major && a % 10 <= minor) best = std::max(best, a);
  }
  if (best) k.how = "sm_" + std::to_string(best) + " machine code";
  if (k.how.empty() && newest && cc > newest)
    k.how = "PTX of sm_" + std::to_string(newest) + ", compiled by the driver at first use";
  k.runs = !k.how.empty();
  if (k.runs) return k;
  const std::string gpu = "GPU '" + gpu_name + "' (compute capability " + std::to_string(major) + "." +
                          std::to_string(minor) + ")";
  if (built.empty()) {
    k.message = gpu + ": this lmscale build has no CUDA kernels (built without nvcc). Fix: install the CUDA "
                      "toolkit and rebuild (./lmscale build), or use --attention sdpa or naive.";
  } else if (cc < 80) {
    k.message = gpu + " is older than lmscale's kernels support (sm_80 or later: A100, RTX 30xx/40xx, L4, "
                      "H100; this build has " + list + "). Use --attention sdpa or naive on this GPU.";
  } else {
    k.message = gpu + " has no code in this build's kernels (built for " + list + "). Fix: rebuild for it, "
                      "e.g. cmake -S . -B build -DLMSCALE_CUDA_ARCHS=\"" + std::to_string(cc) +
                "\" && ./lmscale build (the default list 80;86;89;90 covers A100, RTX 30xx/A10, L4/RTX 40xx, "
                "H100), or use --attention sdpa or naive.";
  }
  return k;
}

std::pair<int, int> cuda_capability(int device_index) {
#ifdef LMSCALE_CUDA
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device_index) == cudaSuccess) return {p.major, p.minor};
#endif
  return {0, 0};
}

void check_kernels_run_on(const c10::Device& d) {
  if (!d.is_cuda()) return;
  static std::mutex mu;
  static std::map<int, std::string> checked;  // device index → "" (runs) or the error message
  std::lock_guard<std::mutex> lock(mu);
  auto it = checked.find(d.index());
  if (it == checked.end()) {
    const auto [major, minor] = cuda_capability(d.index());
    it = checked.emplace(d.index(), kernel_support(device_name(d), major, minor, built_cuda_archs()).message).first;
  }
  TORCH_CHECK(it->second.empty(), it->second);
}

#ifdef LMSCALE_CUDA
namespace {
// The caching allocator exists only after the process's first CUDA use; its per-device calls fail
// before that ("Invalid device argument ...: did you call init?", seen on an H100 when `lmscale
// memory` read its baseline before building the model). Create it first, as torch.cuda does.
c10::DeviceIndex allocator_device(const c10::Device& d) {
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  return d.index();
}
}  // namespace
#endif

MemoryStats memory_stats(const c10::Device& d) {
  MemoryStats m;
#ifdef LMSCALE_CUDA
  if (d.is_cuda()) {
    auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(allocator_device(d));
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
  if (d.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(allocator_device(d));
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
