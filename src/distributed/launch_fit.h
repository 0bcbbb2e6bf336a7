// Whether a `lmscale launch` request fits the machine, checked before any rank starts (not OOM-killed mid-run):
// ranks against cores, and an estimate of each rank's memory against what the machine has free
// (host memory for CPU ranks, each GPU's memory when ranks share GPUs). A request that cannot fit
// is refused with the numbers and the override flag; one that only oversubscribes the cores
// mildly gets a warning. The estimate is deliberately plain (below); the numbers it prints say
// what it assumed.
#pragma once
#include <cstdint>
#include <string>

namespace lmscale::distributed {

// What this machine offers a launch.
struct Machine {
  int cores = 1;                  // CPUs this process may run on (sched_getaffinity)
  int64_t available_bytes = 0;    // host memory available now (/proc/meminfo MemAvailable)
  int gpus = 0;                   // visible GPUs
  int64_t gpu_bytes = 0;          // memory of one GPU (the smallest), 0 when unknown
};
Machine this_machine();

struct LaunchRequest {
  int ranks = 1;            // on this machine
  int64_t params = 0;       // the model's parameter count when the command names a size, else 0
  bool gpu = false;         // the ranks run on GPUs (one per rank, or sharing)
};

// Memory one rank needs, estimated: a libtorch process with Gloo (measured: ~440 MB per CPU rank of
// `bench ddp --size tiny`) plus 16 bytes per parameter (fp32 weights, gradients and the
// two AdamW moments); a GPU rank adds its CUDA context to the GPU's share.
inline constexpr int64_t kRankProcessBytes = int64_t{400} << 20;
inline constexpr int64_t kCudaContextBytes = int64_t{512} << 20;
inline constexpr int64_t kBytesPerParam = 16;
int64_t host_bytes_per_rank(const LaunchRequest& request);
int64_t gpu_bytes_per_rank(const LaunchRequest& request);

// Ranks per core beyond which a launch is refused (each rank is a busy process, and collectives
// between descheduled ranks crawl); above one per core it is only warned about.
inline constexpr int kMaxRanksPerCore = 4;

struct FitVerdict {
  std::string refusal;  // why the request cannot fit, with the numbers and the fix; "" when it fits
  std::string warning;  // a mild oversubscription, said in one line; "" when none
};
// The flag that overrides a refusal, named in it.
inline constexpr char kOversubscribeFlag[] = "--oversubscribe";
FitVerdict check_launch_fit(const LaunchRequest& request, const Machine& machine);

}  // namespace lmscale::distributed
