// End-to-end benchmark of one config; see e2e_bench.h.
#include "bench/e2e_bench.h"

#include <torch/torch.h>

#include <cstdlib>

#include "train/cuda_graph_step.h"
#include "core/device.h"
#include "core/error.h"
#include "core/record.h"

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
  if (c.cuda_graph) graph = std::make_unique<GraphedStep>(step, c.mode);
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
  Record base("e2e", impl);
  base.update(Json{{field::size, m.name},
                   {field::d_model, m.d_model},
                   {field::d_ff, m.d_ff},
                   {field::layers, m.num_layers},
                   {field::heads, m.num_heads},
                   {field::vocab, m.vocab_size},
                   {field::params, m.param_count()},
                   {field::context, c.setup.context},
                   {field::batch, c.setup.batch},
                   {field::precision, dtype_name(c.setup.precision)},
                   {field::mode, mode_name(c.mode)},
                   {field::attention, attention_backend_name(m.attention)},
                   {field::device, c.setup.device.str()},
                   {field::warmup, c.warmup},
                   {field::steps, c.steps},
                   {field::cuda_graph, c.cuda_graph}});
  base.set_status(r.status, r.status == "ok" ? "" : r.message);
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

}  // namespace lmscale
