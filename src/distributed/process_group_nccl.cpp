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
                                                     int world_size, std::chrono::milliseconds timeout,
                                                     const NcclTuning& tuning) {
#ifdef LMSCALE_CUDA
  // A high-priority stream lets the scheduler run a collective's kernels ahead of queued backward
  // kernels when both are ready, so a bucket's transfer starts as soon as its gradients are final.
  auto opts = c10d::ProcessGroupNCCL::Options::create(tuning.high_priority_stream);
  // The watchdog aborts collectives older than this, so a dead peer ends the run instead of hanging it.
  opts->timeout = timeout;
#ifdef NCCL_HAS_CONFIG
  // Fewer CTAs per collective leave SMs to the backward that runs beside it (at some bandwidth
  // cost); measured both ways by `bench ddp --nccl-max-ctas`.
  if (tuning.max_ctas > 0) opts->config.maxCTAs = tuning.max_ctas;
  if (tuning.min_ctas > 0) opts->config.minCTAs = tuning.min_ctas;
#else
  TORCH_CHECK(tuning.max_ctas == 0 && tuning.min_ctas == 0, "this NCCL has no communicator config; drop the CTA limits.");
#endif
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, opts);
#else
  (void)tuning;
  TORCH_CHECK(false, "the nccl backend needs a CUDA build of lmscale (this one has none); use --backend gloo.");
  return {};
#endif
}

}  // namespace lmscale::distributed
