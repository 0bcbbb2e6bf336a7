// Checking a launch against the machine; see launch_fit.h.
#include "distributed/launch_fit.h"

#include <sched.h>
#include <unistd.h>

#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/device.h"

namespace lmscale::distributed {
namespace {

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (int64_t{1} << 30));
  return buf;
}

int64_t mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  int64_t kb = 0;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? int64_t{pages} * page : 0;
}

}  // namespace

Machine this_machine() {
  Machine m;
  cpu_set_t set;
  CPU_ZERO(&set);
  m.cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  m.cores = std::max(1, m.cores);
  m.available_bytes = mem_available_bytes();
  m.gpus = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  for (int g = 0; g < m.gpus; ++g) {
    const int64_t bytes = gpu_total_memory(g);
    m.gpu_bytes = g == 0 ? bytes : std::min(m.gpu_bytes, bytes);
  }
  return m;
}

int64_t host_bytes_per_rank(const LaunchRequest& r) {
  return kRankProcessBytes + (r.gpu ? 0 : kBytesPerParam * r.params);
}

int64_t gpu_bytes_per_rank(const LaunchRequest& r) { return r.gpu ? kCudaContextBytes + kBytesPerParam * r.params : 0; }

FitVerdict check_launch_fit(const LaunchRequest& r, const Machine& m) {
  FitVerdict v;
  const std::string override_note = " (pass " + std::string(kOversubscribeFlag) + " to launch anyway)";
  std::ostringstream why;
  const int64_t host = host_bytes_per_rank(r) * r.ranks;
  if (m.available_bytes > 0 && host > m.available_bytes)
    why << r.ranks << " ranks need about " << gib(host) << " of host memory (" << gib(host_bytes_per_rank(r))
        << " each: a libtorch process" << (r.gpu ? "" : " plus 16 bytes per parameter") << "), and "
        << gib(m.available_bytes) << " is available; ";
  if (r.ranks > kMaxRanksPerCore * m.cores)
    why << r.ranks << " ranks on " << m.cores << (m.cores == 1 ? " core" : " cores") << " is more than "
        << kMaxRanksPerCore << " per core (they would mostly wait for each other); ";
  if (r.gpu && m.gpus > 0) {
    const int per_gpu = (r.ranks + m.gpus - 1) / m.gpus;
    const int64_t need = gpu_bytes_per_rank(r) * per_gpu;
    if (m.gpu_bytes > 0 && need > m.gpu_bytes)
      why << per_gpu << " ranks per GPU need about " << gib(need) << " of its " << gib(m.gpu_bytes) << "; ";
  }
  std::string refusal = why.str();
  if (!refusal.empty()) {
    refusal.resize(refusal.size() - 2);
    const int fits = static_cast<int>(std::max<int64_t>(
        1, std::min<int64_t>(int64_t{kMaxRanksPerCore} * m.cores,
                             m.available_bytes > 0 ? m.available_bytes / std::max<int64_t>(1, host_bytes_per_rank(r))
                                                   : r.ranks)));
    v.refusal = "launch: -n " + std::to_string(r.ranks) + " does not fit this machine: " + refusal +
                ". Use -n " + std::to_string(std::min(fits, std::max(1, m.cores))) + " or fewer" + override_note;
    return v;
  }
  if (r.ranks > m.cores)
    v.warning = "lmscale launch: " + std::to_string(r.ranks) + " ranks on " + std::to_string(m.cores) +
                (m.cores == 1 ? " core" : " cores") + ": they share cores, so times are slower than on a machine "
                "with one core per rank";
  return v;
}

}  // namespace lmscale::distributed
