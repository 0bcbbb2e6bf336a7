// Whole-step CUDA graph capture; see cuda_graph_step.h.
#include "train/cuda_graph_step.h"

#include <c10/util/Exception.h>

#include <string>

#include "core/fault_injection.h"

#ifdef LMSCALE_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace lmscale {

#ifdef LMSCALE_CUDA
namespace {
// A capture that threw part-way leaves the stream capturing and the allocator routing into the
// graph's private pool; CUDAGraph's own destructor releases that pool only after a successful
// capture_end. End both here so the eager step can take the memory back.
void abandon_capture(at::cuda::CUDAGraph& graph, const c10::cuda::CUDAStream& stream, c10::DeviceIndex dev) {
  // A forbidden call inside the capture (a device synchronize, seen on an H100 with
  // LMSCALE_INJECT_FAULT=capture-sync@<size>) invalidates it and leaves its error pending; the query
  // below may then report that error instead of the status. Clear it first, and end the capture
  // whenever the stream is, or may still be, capturing: every later launch on it otherwise fails
  // with "operation not permitted when stream is capturing" (the eager fallback and every later
  // config did).
  (void)cudaGetLastError();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t queried = cudaStreamIsCapturing(stream.stream(), &status);
  if (queried != cudaSuccess || status != cudaStreamCaptureStatusNone) {
    c10::cuda::CUDACachingAllocator::endAllocateToPool(dev, graph.pool());
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream.stream(), &partial);  // reports the invalidation; the graph is discarded
    if (partial) cudaGraphDestroy(partial);
    c10::cuda::CUDACachingAllocator::releasePool(dev, graph.pool());
  }
  (void)cudaGetLastError();  // the capture error is not sticky: clear it so later checks see success
}

// LMSCALE_INJECT_FAULT=capture-sync@<size>[:<context>]: a device-wide synchronize inside the capture
// of that config's step, which CUDA forbids: a real capture failure, so the fallback and its clean-up
// run on a GPU.
bool inject_sync_during_capture(const TrainingStep& step) {
  return fault_injected(InjectedFault::capture_sync, step.setup().model.name, step.setup().context);
}
}  // namespace

struct GraphedStep::Impl {
  at::cuda::CUDAGraph graph;
};

GraphedStep::GraphedStep(TrainingStep& step, BenchMode mode) : impl_(std::make_unique<Impl>()) {
  const c10::Device device = step.setup().device;
  TORCH_CHECK(device.is_cuda(), "--cuda-graph needs a GPU (--device cuda); it captures CUDA work only");
  c10::cuda::CUDAGuard device_guard(device);
  auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
  c10::cuda::device_synchronize();  // one-time setup: a full sync is simpler than cross-stream events
  {
    // Capture needs a non-default stream; warm-up on the same stream so lazily created state
    // (cuBLAS workspaces, optimizer state) exists before capture and is reused by it.
    // Gradients are set to None after each step, eagerly and in the graph: the captured backward
    // then allocates them in the graph's private pool (fixed addresses on every replay) and
    // autograd hands each gradient over without a copy. Gradients kept and zeroed in place instead
    // cost an accumulate (read + read + write) and a zeroing per step, 16 B per parameter: ~18 ms
    // on 2.7B, more than the graph saves (measured: docs/training_step_notes.md).
    c10::cuda::CUDAStreamGuard guard(side);
    for (int i = 0; i < 3; ++i) step.run(mode, nullptr, /*keep_grads=*/false);
    side.synchronize();
    // The capture allocates its activations from a private pool, which cannot reuse the blocks the
    // eager warm-up left cached in the ordinary pool. Near the memory limit (2.7B: ~55 GB of
    // weights, gradients and AdamW state) the allocator then frees cached blocks *during* capture,
    // and cudaFree is illegal while a stream captures ("operation not permitted when stream is
    // capturing"). Handing the cache back first lets the private pool take that memory instead.
    c10::cuda::CUDACachingAllocator::emptyCache();
    const bool sync_inside_capture = inject_sync_during_capture(step);
    try {
      impl_->graph.capture_begin();
      if (sync_inside_capture) c10::cuda::device_synchronize();
      step.run(mode, nullptr, /*keep_grads=*/false);
      impl_->graph.capture_end();
    } catch (...) {
      abandon_capture(impl_->graph, side, device.index());
      throw;
    }
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

std::unique_ptr<GraphedStep> try_capture(TrainingStep& step, BenchMode mode, std::string& note) {
  note.clear();
  if (!step.setup().device.is_cuda()) {
    note = "no CUDA graph: the step runs on " + step.setup().device.str();
    return nullptr;
  }
  try {
    return std::make_unique<GraphedStep>(step, mode);
  } catch (const std::exception& e) {
    std::string what = e.what();
    // c10 errors append a C++ backtrace after the first line; one line is enough for a record.
    if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    note = "CUDA graph capture failed, step runs eagerly: " + what;
  }
  // The failed capture may have left graph-pool tensors alive in the step (the loss and the graph
  // of saved activations behind it): drop them and the allocator's cache, so the eager step starts
  // with the memory it had before.
  step.release_loss();
#ifdef LMSCALE_CUDA
  c10::cuda::device_synchronize();
  c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  return nullptr;
}

}  // namespace lmscale
