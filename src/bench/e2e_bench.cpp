// End-to-end benchmark of one config; see e2e_bench.h.
#include "bench/e2e_bench.h"

#include <torch/torch.h>

#include <cstdlib>
#include <iostream>

#include "train/cuda_graph_step.h"
#include "core/device.h"
#include "core/error.h"

namespace lmscale {
namespace {

void maybe_inject_oom(const E2EConfig& c) {
  const char* spec = std::getenv("LMSCALE_INJECT_OOM");
  if (!spec || !*spec) return;
  std::string s = spec, size = s, ctx;
  if (auto colon = s.find(':'); colon != std::string::npos) {
    size = s.substr(0, colon);
    ctx = s.substr(colon + 1);
  }
  bool match = size == c.setup.model.name && (ctx.empty() || std::stoll(ctx) == c.setup.context);
  TORCH_CHECK_WITH(OutOfMemoryError, !match, "injected out of memory (LMSCALE_INJECT_OOM=", s, ")");
}

void measure(const E2EConfig& c, E2EResult& r) {
  TrainingStep step(c.setup);
  maybe_inject_oom(c);
  r.params = c.setup.model.param_count();
  const c10::Device dev = c.setup.device;
  StepClock clock(dev);
  std::vector<double> fwd, bwd, opt, total;
  std::unique_ptr<GraphedStep> graph;
  if (c.cuda_graph && dev.is_cuda()) {
    graph = try_capture(step, c.mode, r.cuda_graph_note);
    if (!graph) std::cerr << "note: " << c.setup.model.name << " context " << c.setup.context << ": "
                          << r.cuda_graph_note << "\n";
  }
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
    const int last = graph ? 1 : (c.mode == BenchMode::Forward ? 1 : c.mode == BenchMode::ForwardBackward ? 2 : 3);
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

E2EResult run_e2e(const E2EConfig& c) {
  TORCH_CHECK(c.warmup >= 0, "--warmup must be >= 0, got ", c.warmup);
  TORCH_CHECK(c.steps >= 1, "--steps must be >= 1, got ", c.steps);
  validate(c.setup);
  E2EResult r;
  try {
    measure(c, r);
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
    r = E2EResult{};
    r.status = "oom";
    r.message = error_message(e);
    r.params = c.setup.model.param_count();
  }
  // Everything the run allocated is gone with `step`; hand cached blocks back so the next config
  // of a sweep starts from an empty allocator.
  release_cached_memory(c.setup.device);
  return r;
}

std::vector<Json> e2e_records(const E2EConfig& c, const E2EResult& r, const std::string& impl) {
  const auto& m = c.setup.model;
  Json base = make_record("e2e", impl);
  base.update(Json{{"size", m.name},
                   {"d_model", m.d_model},
                   {"d_ff", m.d_ff},
                   {"layers", m.num_layers},
                   {"heads", m.num_heads},
                   {"vocab", m.vocab_size},
                   {"params", m.param_count()},
                   {"context", c.setup.context},
                   {"batch", c.setup.batch},
                   {"precision", dtype_name(c.setup.precision)},
                   {"mode", mode_name(c.mode)},
                   {"attention", attention_backend_name(m.attention)},
                   {"device", c.setup.device.str()},
                   {"warmup", c.warmup},
                   {"steps", c.steps},
                   {"cuda_graph", r.cuda_graph},
                   {"status", r.status}});
  if (!r.cuda_graph_note.empty()) base["cuda_graph_note"] = r.cuda_graph_note;
  if (r.extra.is_object()) base.update(r.extra);
  std::vector<Json> out;
  auto add = [&](const std::string& metric, double value, const std::string& unit, const Summary* s = nullptr) {
    Json j = base;
    j["metric"] = metric;
    j["value"] = value;
    j["unit"] = unit;
    if (s) j.update(Json{{"std", s->std}, {"median", s->median}, {"min", s->min}, {"max", s->max}, {"n", s->n}});
    out.push_back(std::move(j));
  };
  if (r.status != "ok") {
    Json j = base;
    j.update(Json{{"metric", "status"}, {"value", nullptr}, {"unit", ""}, {"message", r.message}});
    return {j};
  }
  if (r.forward.n) add("forward_ms", r.forward.mean, "ms", &r.forward);
  if (r.backward.n) add("backward_ms", r.backward.mean, "ms", &r.backward);
  if (r.optimizer.n) add("optimizer_ms", r.optimizer.mean, "ms", &r.optimizer);
  add("step_ms", r.total.mean, "ms", &r.total);
  add("tokens_per_s", r.tokens_per_s, "tokens/s");
  if (r.mfu > 0) add("mfu", r.mfu, "fraction");
  if (c.setup.device.is_cuda()) add("peak_memory_bytes", static_cast<double>(r.peak_bytes), "bytes");
  if (r.extra.is_object() && r.extra.contains("compile_s")) add("compile_s", r.extra["compile_s"].get<double>(), "s");
  Json steps = base;
  steps.update(Json{{"metric", "all_step_ms"}, {"value", r.step_ms}, {"unit", "ms"}});
  out.push_back(steps);
  return out;
}

}  // namespace lmscale
