// Kineto-based per-phase profile of one training step; see profile_run.h.
#include "profile/profile_run.h"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <set>
#include <unordered_set>

#include "core/device.h"
#include "core/nvtx.h"

namespace lmscale {
namespace {

namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

std::vector<TraceOp> flatten(const prof::ProfilerResult& result) {
  const auto& events = result.events();
  // Names of CPU user scopes: Kineto may mirror them as GPU-side annotation spans, which are
  // ranges, not kernels, and must not be counted as device time.
  std::unordered_set<std::string> scope_names;
  for (const auto& e : events)
    if (e.deviceType() == c10::DeviceType::CPU && e.scope() == static_cast<uint8_t>(at::RecordScope::USER_SCOPE))
      scope_names.insert(e.name());
  std::vector<TraceOp> out;
  out.reserve(events.size());
  for (const auto& e : events) {
    TraceOp t;
    t.name = e.name();
    t.on_device = e.deviceType() != c10::DeviceType::CPU;
    t.user_scope = e.scope() == static_cast<uint8_t>(at::RecordScope::USER_SCOPE) || scope_names.count(t.name);
    t.start_ns = e.startNs();
    t.end_ns = std::max(e.endNs(), e.startNs());
    t.thread = e.startThreadId();
    t.correlation = e.correlationId();
    t.linked_correlation = e.linkedCorrelationId();
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

ProfileReport run_profile(const ProfileOptions& o) {
  TORCH_CHECK(o.steps >= 1, "--steps ", o.steps, " must be at least 1 (profiled steps after warm-up)");
  TORCH_CHECK(o.warmup >= 0, "--warmup ", o.warmup, " must be >= 0");
  TrainingStep step(o.setup);
  const c10::Device dev = o.setup.device;
  for (int i = 0; i < o.warmup; ++i) step.run(o.mode);
  synchronize(dev);

  std::set<ActivityType> activities{ActivityType::CPU};
  if (dev.is_cuda()) activities.insert(ActivityType::CUDA);
  const ProfilerConfig config(ProfilerState::KINETO);
  // Kineto must be prepared again before every window: enabling a second time after one prepare
  // crashes in disableProfiler (libtorch 2.11, seen on CPU), which is also what Python's profiler does.
  auto open_window = [&] {
    prof::prepareProfiler(config, activities);
    prof::enableProfiler(config, activities);
  };

  // The phases of TrainingStep::run in this mode, each in its own profiler window. Forward-backward
  // clears the gradients outside the windows, as run() does after its backward.
  std::vector<std::pair<std::string, std::function<void()>>> phases = {
      {"forward", [&] { step.forward(o.mode); }}};
  if (o.mode != StepMode::Forward) phases.emplace_back("backward", [&] { step.backward(); });
  if (o.mode == StepMode::TrainStep) phases.emplace_back("optimizer", [&] { step.optimizer_step(); });
  auto after_step = [&] {
    if (o.mode == StepMode::ForwardBackward) step.optimizer().zero_grad(true);
  };

  std::vector<std::vector<TraceOp>> events(phases.size());
  std::vector<std::vector<double>> wall_ms(phases.size());
  for (int s = 0; s < o.steps; ++s) {
    for (size_t p = 0; p < phases.size(); ++p) {
      open_window();
      auto t0 = std::chrono::steady_clock::now();
      try {
        phases[p].second();
        synchronize(dev);
      } catch (...) {
        prof::disableProfiler();  // leave no profiler running behind an OOM or a bad setup
        throw;
      }
      wall_ms[p].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      auto result = prof::disableProfiler();
      auto flat = flatten(*result);
      events[p].insert(events[p].end(), std::make_move_iterator(flat.begin()), std::make_move_iterator(flat.end()));
    }
    after_step();
  }

  ProfileReport report;
  for (size_t p = 0; p < phases.size(); ++p) {
    report.phases.push_back(summarize_phase(phases[p].first, events[p], o.steps, dev.is_cuda()));
    report.wall.push_back(summarize(wall_ms[p]));
    report.wall_ms.push_back(report.wall.back().mean);
  }
  if (!o.trace_path.empty()) {
    open_window();
    try {
      step.run(o.mode);
      synchronize(dev);
    } catch (...) {
      prof::disableProfiler();
      throw;
    }
    auto result = prof::disableProfiler();
    std::filesystem::path tp(o.trace_path);
    if (tp.has_parent_path()) std::filesystem::create_directories(tp.parent_path());
    result->save(o.trace_path);
    report.trace_path = o.trace_path;
  }
  return report;
}

}  // namespace lmscale
