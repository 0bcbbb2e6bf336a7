// The NCCL backend: the one translation unit that includes ProcessGroupNCCL.hpp (and so nccl.h, from
// the CUDA toolkit or the torch wheel's nvidia/nccl). CPU-only builds get a stub that explains.
#ifdef LMSCALE_CUDA
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#include "distributed/process_group.h"

namespace lmscale::distributed {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                     int world_size, std::chrono::milliseconds timeout) {
#ifdef LMSCALE_CUDA
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  // The watchdog aborts collectives older than this, so a dead peer ends the run instead of hanging it.
  opts->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, opts);
#else
  TORCH_CHECK(false, "the nccl backend needs a CUDA build of lmscale (this one has none); use --backend gloo.");
  return {};
#endif
}

}  // namespace lmscale::distributed
