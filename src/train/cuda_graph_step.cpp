// Whole-step CUDA graph capture; see cuda_graph_step.h.
#include "train/cuda_graph_step.h"

#include <c10/util/Exception.h>

#ifdef LMSCALE_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace lmscale {

#ifdef LMSCALE_CUDA
struct GraphedStep::Impl {
  at::cuda::CUDAGraph graph;
};

GraphedStep::GraphedStep(TrainingStep& step, BenchMode mode) : impl_(std::make_unique<Impl>()) {
  TORCH_CHECK(step.setup().device.is_cuda(), "--cuda-graph needs a GPU (--device cuda); it captures CUDA work only");
  auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, step.setup().device.index());
  c10::cuda::device_synchronize();  // one-time setup: a full sync is simpler than cross-stream events
  {
    // Capture needs a non-default stream; warm-up on the same stream so lazily created state
    // (cuBLAS workspaces, optimizer state, gradients) exists before capture and is reused by it.
    c10::cuda::CUDAStreamGuard guard(side);
    for (int i = 0; i < 3; ++i) step.run(mode, nullptr, /*keep_grads=*/true);
    side.synchronize();
    impl_->graph.capture_begin();
    step.run(mode, nullptr, /*keep_grads=*/true);
    impl_->graph.capture_end();
  }
  c10::cuda::device_synchronize();
}

void GraphedStep::replay() { impl_->graph.replay(); }
#else
struct GraphedStep::Impl {};
GraphedStep::GraphedStep(TrainingStep&, BenchMode) {
  TORCH_CHECK(false, "--cuda-graph needs a CUDA build of lmscale (nvcc present at build time) and a GPU");
}
void GraphedStep::replay() {}
#endif

GraphedStep::~GraphedStep() = default;

}  // namespace lmscale
