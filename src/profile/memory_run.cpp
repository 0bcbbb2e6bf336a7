// Peak-memory cells and memory-history recording on CUDA; see memory_run.h.
#include "profile/memory_run.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "core/device.h"
#include "core/error.h"

#ifdef LMSCALE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/csrc/cuda/memory_snapshot.h>
#endif

namespace lmscale {

std::string memory_unsupported_reason(const c10::Device& device) {
#ifndef LMSCALE_CUDA
  return "memory measurements need CUDA (the CUDA caching allocator keeps the statistics and the history), "
         "and this build has no CUDA: rebuild on a machine with nvcc";
#else
  if (!device.is_cuda())
    return "memory measurements need a CUDA device (the CUDA caching allocator keeps the statistics and the "
           "history; the CPU allocator keeps neither); got --device " + device.str() +
           ": run on a GPU machine with --device cuda";
  return "";
#endif
}

namespace {

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

PeakCell measure_peak(const StepSetup& setup, StepMode mode) {
  PeakCell cell;
  const c10::Device dev = setup.device;
  if (auto why = memory_unsupported_reason(dev); !why.empty()) {
    cell.status = "n/a";
    cell.note = why;
    return cell;
  }
  release_cached_memory(dev);
  try {
    TrainingStep step(setup);
    synchronize(dev);
    cell.after_init = memory_stats(dev).allocated;
    step.run(mode);  // warm-up: the train step creates the AdamW state here
    synchronize(dev);
    reset_peak_memory(dev);
    step.run(mode);
    synchronize(dev);
    cell.peak = memory_stats(dev).peak_allocated;
    cell.status = "ok";
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
    cell.status = "OOM";
    cell.note = first_line(error_message(e));
  }
  release_cached_memory(dev);
  return cell;
}

#ifdef LMSCALE_CUDA
namespace {

// Note [Where an allocation comes from]
// The allocator's own context is a stack trace, which from C++ means unwinding and symbolizing
// thousands of frames. lmscale instead keeps, per thread, the stack of RecordFunction scopes that
// are open (user ranges such as "attention/softmax" and aten ops), through a global RecordFunction
// callback, and labels each allocator event with it from an allocator trace tracker, which the
// allocator calls synchronously on the allocating thread. Backward ops run on autograd's device
// thread, outside the main thread's ranges, so the phase is a process-wide value set by the
// "forward" / "backward" / "optimizer" ranges that TrainingStep::run opens on the main thread.

struct OpFrame {
  std::string name;
  bool user;
};
thread_local std::vector<OpFrame> t_ops;

std::atomic<bool> g_recording{false};
std::atomic<int> g_phase{0};
const char* const kPhases[] = {"", "init", "forward", "backward", "optimizer"};
std::mutex g_events_mutex;
std::vector<AllocEvent>* g_events = nullptr;  // guarded by g_events_mutex

int phase_index(const char* name) {
  for (int i = 2; i < 5; ++i)
    if (std::strcmp(name, kPhases[i]) == 0) return i;
  return 0;
}

std::string where_now();

// Note [Labels inside the pickle]
// The same label also goes into the snapshot itself: the allocator attaches its "user metadata"
// string to every allocation made after it is set (the `user_metadata` of each trace entry in the
// pickle), so PyTorch's memory viewer shows "phase=backward where=attention/softmax: aten::..."
// on a block. The string is process-wide, so it is set on entering and leaving every op, on the
// thread that is about to allocate (the main thread for forward, autograd's for backward).
void label_allocations() {
  if (!g_recording.load(std::memory_order_relaxed)) return;
  const char* phase = kPhases[g_phase.load()];
  c10::cuda::CUDACachingAllocator::setUserMetadata(std::string("phase=") + (*phase ? phase : "none") +
                                                   " where=" + where_now());
}

std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction& fn) {
  const bool user = fn.scope() == at::RecordScope::USER_SCOPE;
  t_ops.push_back({fn.name(), user});
  if (user)
    if (int p = phase_index(fn.name())) g_phase = p;
  label_allocations();
  return nullptr;
}

void on_op_end(const at::RecordFunction& fn, at::ObserverContext*) {
  if (fn.scope() == at::RecordScope::USER_SCOPE && phase_index(fn.name())) g_phase = 0;
  if (!t_ops.empty()) t_ops.pop_back();
  label_allocations();
}

// "attention/softmax: aten::softmax > aten::_softmax": the innermost user range, then the outermost
// op opened inside it and the innermost op (the one that asked for memory).
std::string where_now() {
  if (t_ops.empty()) return "(no op)";
  size_t first_op = 0;
  std::string range;
  for (size_t i = t_ops.size(); i-- > 0;) {
    if (t_ops[i].user) {
      range = t_ops[i].name;
      first_op = i + 1;
      break;
    }
  }
  if (first_op >= t_ops.size()) return range;
  std::string s = range.empty() ? "" : range + ": ";
  s += t_ops[first_op].name;
  if (first_op + 1 < t_ops.size()) s += " > " + t_ops.back().name;
  return s;
}

void install_tracker_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    using c10::CachingDeviceAllocator::TraceEntry;
    // Trackers cannot be detached; this one is idle (one atomic load) unless a recording is on.
    c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker([](const TraceEntry& te) {
      if (!g_recording.load(std::memory_order_relaxed)) return;
      if (te.action_ != TraceEntry::ALLOC && te.action_ != TraceEntry::FREE_COMPLETED) return;
      AllocEvent e{te.action_ == TraceEntry::ALLOC, static_cast<uint64_t>(te.addr_), static_cast<int64_t>(te.size_),
                   kPhases[g_phase.load()], where_now()};
      std::lock_guard<std::mutex> lock(g_events_mutex);
      if (g_events) g_events->push_back(std::move(e));
    });
  });
}

// Turns the allocator history, lmscale's tracker and the op callback on for its lifetime.
class Recording {
 public:
  Recording(std::vector<AllocEvent>* events, const std::string& stacks) {
    install_tracker_once();
    {
      std::lock_guard<std::mutex> lock(g_events_mutex);
      g_events = events;
    }
    torch::cuda::_record_memory_history(std::optional<std::string>("all"), std::optional<std::string>("all"), stacks,
                                        kMaxEntries);
    callback_ = at::addGlobalCallback(at::RecordFunctionCallback(on_op_start, on_op_end)
                                          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                                                   at::RecordScope::USER_SCOPE}));
    g_phase = 1;  // init
    g_recording = true;
    label_allocations();
  }
  ~Recording() {
    g_recording = false;
    g_phase = 0;
    c10::cuda::CUDACachingAllocator::setUserMetadata("");
    at::removeCallback(callback_);
    torch::cuda::_record_memory_history(std::optional<std::string>(), std::optional<std::string>(), "python", 0);
    std::lock_guard<std::mutex> lock(g_events_mutex);
    g_events = nullptr;
  }
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;

 private:
  static constexpr size_t kMaxEntries = 2'000'000;  // a 2.7B train step makes a few 10k events
  at::CallbackHandle callback_;
};

}  // namespace
#endif

MemoryRecording record_memory(const StepSetup& setup, StepMode mode, int steps, const std::string& pickle_path,
                              const std::string& stacks) {
  const c10::Device dev = setup.device;
  if (auto why = memory_unsupported_reason(dev); !why.empty()) TORCH_CHECK(false, why);
  TORCH_CHECK(steps >= 1, "--snapshot-steps ", steps, " must be at least 1");
  TORCH_CHECK(stacks == "python" || stacks == "all", "--stacks '", stacks,
              "' is not understood: use python (no C++ frames, fast) or all (C++ frames in the pickle, slow)");
  MemoryRecording rec;
#ifdef LMSCALE_CUDA
  release_cached_memory(dev);
  const int64_t baseline = memory_stats(dev).allocated;
  {
    Recording on(&rec.events, stacks);
    TrainingStep step(setup);
    for (int i = 0; i < steps; ++i) step.run(mode);
    synchronize(dev);
    if (!pickle_path.empty()) {
      std::filesystem::path p(pickle_path);
      if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
      const std::string bytes = torch::cuda::_memory_snapshot_pickled();
      std::ofstream f(pickle_path, std::ios::binary);
      TORCH_CHECK(f, "cannot write ", pickle_path, ": check that the --out folder is writable");
      f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      rec.pickle_path = pickle_path;
    }
  }  // recording stops before the step is destroyed: the timeline ends with the last step
  rec.timeline = replay(rec.events, baseline);
  release_cached_memory(dev);
#endif
  return rec;
}

}  // namespace lmscale
