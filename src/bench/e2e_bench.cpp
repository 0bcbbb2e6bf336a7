// End-to-end benchmark of one config; see e2e_bench.h.
#include "bench/e2e_bench.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "core/device.h"
#include "core/error.h"
#include "core/fault_injection.h"
#include "model/config_fields.h"
#include "results/record.h"
#include "train/graphed_step.h"

namespace lmscale {
namespace {

// Fails this config the way the real fault would, for tests of the paths that record it: the first
// fault LMSCALE_INJECT_OOM / LMSCALE_INJECT_FAULT (see e2e_bench.h) asks for it, other than
// capture-sync (which the CUDA-graph capture itself acts on) and diverge (bench ddp/zero). Whatever
// acts on the cell is named in r.injected, so its record says the failure was made on purpose.
void maybe_inject_fault(const E2EConfig& c, E2EResult& r) {
  for (const InjectedFault fault : injected_faults(c.setup.model.name, c.setup.context)) {
    if (fault == InjectedFault::diverge) continue;
    if (fault == InjectedFault::capture_sync) {
      if (c.cuda_graph && c.setup.device.is_cuda()) r.injected = to_string(fault);
      continue;
    }
    r.injected = to_string(fault);
    if (fault == InjectedFault::oom)  // an allocation no device can hold: its own allocator raises its own error
      (void)torch::empty({int64_t{1} << 60}, torch::TensorOptions().dtype(torch::kUInt8).device(c.setup.device));
    if (fault == InjectedFault::capture)
      throw InjectedFaultError(fault, "CUDA error: operation not permitted when stream is capturing (injected: "
                                      "LMSCALE_INJECT_FAULT=capture@" + c.setup.model.name + ")");
    throw InjectedFaultError(fault, "CUDA error: unspecified launch failure (injected: LMSCALE_INJECT_FAULT=error@" +
                                        c.setup.model.name + ")");
  }
}

// A cell's status from the cause of its failure, never from words in the message: a fault injected
// on purpose says what it stands for; running out of memory is known by the error's type (or the CPU
// allocator's origin, core/error.h); anything else is an error. (A real CUDA-graph capture failure
// does not reach here: try_capture falls back to the eager step and leaves a note.)
Status status_of_failure(const std::exception& e) {
  if (const auto* injected = dynamic_cast<const InjectedFaultError*>(&e))
    return injected->fault() == InjectedFault::capture ? Status::capture_failed : Status::error;
  return is_out_of_memory(e) ? Status::oom : Status::error;
}

// The first line of an error: a cell's reason is one line.
std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

void measure(const E2EConfig& c, E2EResult& r) {
  TrainingStep step(c.setup);
  maybe_inject_fault(c, r);
  r.params = c.setup.model.param_count();
  const c10::Device dev = c.setup.device;
  StepClock clock(dev);
  std::vector<double> fwd, bwd, opt, total;
  std::unique_ptr<GraphedStep> graph;
  // A failed capture leaves its one-line note in r.cuda_graph_note: the caller prints it after the
  // cell's progress line has ended (printed here, it would land in the middle of that line).
  if (c.cuda_graph && dev.is_cuda()) graph = try_capture(step, c.mode, r.cuda_graph_note);
  r.cuda_graph = graph != nullptr;
  synchronize(dev);
  reset_peak_memory(dev);
  for (int i = 0; i < c.warmup + c.steps; ++i) {
    clock.clear();
    if (graph) {
      clock.mark();
      graph->replay();
      clock.mark();
    } else {
      step.run(c.mode, &clock);
    }
    clock.synchronize();  // one host sync per step, as the reference measurement prescribes
    const int last = graph ? 1 : (c.mode == StepMode::Forward ? 1 : c.mode == StepMode::ForwardBackward ? 2 : 3);
    const double t = clock.ms(0, last);
    r.step_ms.push_back(t);
    if (i < c.warmup) continue;
    total.push_back(t);
    if (graph) continue;
    fwd.push_back(clock.ms(0, 1));
    if (last >= 2) bwd.push_back(clock.ms(1, 2));
    if (last >= 3) opt.push_back(clock.ms(2, 3));
  }
  r.forward = summarize(fwd);
  r.backward = summarize(bwd);
  r.optimizer = summarize(opt);
  r.total = summarize(total);
  r.peak_bytes = memory_stats(dev).peak_allocated;
  if (r.total.mean > 0) {
    r.tokens_per_s = step.tokens() / (r.total.mean / 1e3);
    const double peak = dev.is_cuda() ? dense_bf16_peak_flops(device_name(dev)) : 0.0;
    r.mfu = peak > 0 ? step.flops(c.mode) / (r.total.mean / 1e3) / peak : 0.0;
  }
}

}  // namespace

void print_capture_note(const E2EResult& r) {
  if (!r.cuda_graph_note.empty()) std::cerr << "    note: " << r.cuda_graph_note << "\n";
}

E2EResult run_e2e(const E2EConfig& c) {
  TORCH_CHECK(c.warmup >= 0, "--warmup must be >= 0, got ", c.warmup);
  TORCH_CHECK(c.steps >= 1, "--steps must be >= 1, got ", c.steps);
  validate(c.setup);
  E2EResult r;
  try {
    measure(c, r);
  } catch (const std::exception& e) {
    // One config failed; the sweep records it and goes on (docs/results/SCHEMA.md, status words).
    const std::string injected = r.injected;
    r = E2EResult{};
    r.status = status_of_failure(e);
    r.injected = injected;
    r.reason = first_line(error_message(e));
    r.params = c.setup.model.param_count();
  }
  // Everything the run allocated is gone with `step`; hand cached blocks back so the next config
  // of a sweep starts from an empty allocator. After a kernel error the device may refuse that too:
  // the cell already says why, and the next config meets (and records) the same error.
  try {
    release_cached_memory(c.setup.device);
  } catch (const std::exception&) {
    if (r.status == Status::ok) throw;
  }
  return r;
}

std::vector<Json> e2e_records(const E2EConfig& c, const E2EResult& r, const std::string& impl) {
  const auto& m = c.setup.model;
  Record base("e2e", impl);
  base.update(model_fields(m));
  base.update(Json{{field::context, c.setup.context},
                   {field::batch, c.setup.batch},
                   {field::precision, dtype_name(c.setup.precision)},
                   {field::mode, mode_name(c.mode)},
                   {field::attention, attention_backend_name(m.attention)},
                   {field::device, c.setup.device.str()},
                   {field::warmup, c.warmup},
                   {field::steps, c.steps},
                   {field::cuda_graph, r.cuda_graph}});
  if (c.setup.precision == c10::kFloat8_e4m3fn) base.set(field::fp8_scaling, fp8_scaling_name(c.setup.fp8.scaling));
  if (!r.cuda_graph_note.empty()) base.set(field::cuda_graph_note, r.cuda_graph_note);
  if (!r.injected.empty()) base.set(field::injected_fault, r.injected);
  base.set_status(r.status, r.reason);
  if (r.extra.is_object()) base.update(r.extra);
  if (base.status() != Status::ok) return {base.failure()};
  std::vector<Json> out;
  if (r.forward.n) out.push_back(base.metric("forward_ms", r.forward, "ms"));
  if (r.backward.n) out.push_back(base.metric("backward_ms", r.backward, "ms"));
  if (r.optimizer.n) out.push_back(base.metric("optimizer_ms", r.optimizer, "ms"));
  out.push_back(base.metric("step_ms", r.total, "ms"));
  out.push_back(base.metric("tokens_per_s", r.tokens_per_s, "tokens/s"));
  if (r.mfu > 0) out.push_back(base.metric("mfu", r.mfu, "fraction"));
  if (c.setup.device.is_cuda()) out.push_back(base.metric("peak_memory_bytes", static_cast<double>(r.peak_bytes), "bytes"));
  if (r.extra.is_object() && r.extra.contains("compile_s"))
    out.push_back(base.metric("compile_s", r.extra["compile_s"].get<double>(), "s"));
  out.push_back(base.metric("all_step_ms", r.step_ms, "ms"));
  return out;
}

const std::vector<std::string>& e2e_baseline_fields() {
  static const std::vector<std::string> fields = {"compile_s",     "compile_mode",          "compile_scope",
                                                  "graphs_compiled", "compiled_in_timed_steps", "dynamic_shapes",
                                                  "warmup_steps_run", "torch_attention",      "wall_s"};
  return fields;
}

void add_e2e_record(const Json& j, E2EResult& r) {
  r.status = status_from_string(j.value("status", "error"));
  r.reason = j.value("reason", "");
  r.params = j.value("params", int64_t{0});
  auto summary = [&] {
    Summary s;
    s.mean = j.value("value", 0.0);
    s.std = j.value("std", 0.0);
    s.median = j.value("median", 0.0);
    s.min = j.value("min", 0.0);
    s.max = j.value("max", 0.0);
    s.n = j.value("n", 0);
    return s;
  };
  if (j.contains(field::injected_fault) && j[field::injected_fault].is_string())
    r.injected = j[field::injected_fault].get<std::string>();
  const std::string metric = j.value("metric", "");
  const bool number = j.contains("value") && j["value"].is_number();
  if (metric == "forward_ms") r.forward = summary();
  if (metric == "backward_ms") r.backward = summary();
  if (metric == "optimizer_ms") r.optimizer = summary();
  if (metric == "step_ms") r.total = summary();
  if (metric == "tokens_per_s" && number) r.tokens_per_s = j["value"].get<double>();
  if (metric == "mfu" && number) r.mfu = j["value"].get<double>();
  if (metric == "peak_memory_bytes" && number) r.peak_bytes = static_cast<int64_t>(j["value"].get<double>());
  if (metric == "all_step_ms" && j["value"].is_array()) r.step_ms = j["value"].get<std::vector<double>>();
  for (const auto& key : e2e_baseline_fields())
    if (j.contains(key) && !j[key].is_null()) r.extra[key] = j[key];
}

}  // namespace lmscale
