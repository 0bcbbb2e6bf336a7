// Whole-step CUDA graph capture; see graphed_step.h.
#include "train/graphed_step.h"

#include <c10/util/Exception.h>

#include <string>

#include "core/fault_injection.h"

#ifdef LMSCALE_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/core/CachingHostAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace lmscale {

#ifdef LMSCALE_CUDA
namespace {
// A capture that threw part-way must be undone completely, or the process stays unusable: a stream
// still capturing makes every later CUDA call fail with "operation not permitted when stream is
// capturing", an allocator still routing into the graph's private pool keeps the memory, and the
// RNG state stays in capture mode. CUDAGraph undoes capture_begin only in a capture_end that
// succeeds, and pool() refuses to name the pool before that (the first version of this clean-up
// called it and threw before ending the capture: seen on an H100, every later config failed).
// The pool id and the generator states are protected members, hence the subclass.
struct RecoverableGraph : at::cuda::CUDAGraph {
  void abandon() {
    (void)cudaGetLastError();  // a forbidden call inside the capture leaves its error pending
    try {
      capture_end();  // ends the CUDA capture; succeeds only if the capture was still valid
    } catch (const std::exception&) {
      // The capture was invalidated (or had already ended): undo what capture_begin set up.
      // Each undo may find its step already done by capture_end's partial run, hence one try each.
      // capture_end() normally ended the CUDA capture already; this end matters only if it threw first.
      cudaGraph_t partial = nullptr;
      if (cudaStreamEndCapture(capture_stream_.stream(), &partial) == cudaSuccess && partial)
        cudaGraphDestroy(partial);
      quietly([&] { c10::cuda::CUDACachingAllocator::endAllocateToPool(capture_dev_, mempool_id_); });
      quietly([&] { at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(mempool_id_); });
      // What capture_epilogue() does (libtorch does not export it): the RNG leaves capture mode.
      for (auto& entry : captured_generator_states_) entry.first->capturing_ = false;
      quietly([&] { c10::cuda::CUDACachingAllocator::releasePool(capture_dev_, mempool_id_); });
      quietly([&] { at::getHostAllocator(at::kCUDA)->release_pool(mempool_id_); });
    }
    (void)cudaGetLastError();  // capture errors are not sticky: later checks must see success
  }

 private:
  template <class F>
  static void quietly(F&& undo) {
    try {
      undo();
    } catch (...) {
    }
  }
};

// LMSCALE_INJECT_FAULT=capture-sync@<size>[:<context>]: a device-wide synchronize inside the capture
// of that config's step, which CUDA forbids: a real capture failure, so the fallback and its clean-up
// run on a GPU.
bool inject_sync_during_capture(const TrainingStep& step) {
  return fault_injected(InjectedFault::capture_sync, step.setup().model.name, step.setup().context);
}
}  // namespace

struct GraphedStep::Impl {
  RecoverableGraph graph;
};

GraphedStep::GraphedStep(TrainingStep& step, StepMode mode) : impl_(std::make_unique<Impl>()) {
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
      impl_->graph.abandon();
      throw;
    }
  }
  c10::cuda::device_synchronize();
}

void GraphedStep::replay() { impl_->graph.replay(); }
#else
struct GraphedStep::Impl {};
GraphedStep::GraphedStep(TrainingStep&, StepMode) {
  TORCH_CHECK(false, "--cuda-graph needs a CUDA build of lmscale (nvcc present at build time) and a GPU");
}
void GraphedStep::replay() {}
#endif

GraphedStep::~GraphedStep() = default;

std::unique_ptr<GraphedStep> try_capture(TrainingStep& step, StepMode mode, std::string& note) {
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
