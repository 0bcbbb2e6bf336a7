// DDP benchmark; see ddp_bench.h.
//
// Note [DDP overhead model]
// Backward produces s bytes of gradients; buckets of s/n_b bytes each start their all-reduce as
// soon as they fill. With compute per bucket at least as long as its transfer, every transfer but
// the last hides behind backward; what is left after backward is the last bucket's transfer,
// s/(n_b·w), plus the per-call cost o of every collective, which sits on the communication
// stream's critical path (launch, synchronisation, protocol latency): overhead(n_b) = n_b·o +
// s/(n_b·w). d/dn_b = 0 gives n_b* = sqrt(s/(w·o)), so bucket bytes b* = s/n_b* = sqrt(s·w·o).
// o and w are measured on the same group before the runs (all-reduce of 4 bytes, then of 256 MB),
// s is the gradient bytes of the model.
#include "bench/ddp_bench.h"

#include <ATen/ops/full.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <iostream>

#include "train/training_step.h"
#include "core/autocast.h"
#include "core/device.h"
#include "core/error.h"
#include "core/record.h"
#include "core/results.h"
#include "core/timer.h"
#include "distributed/ddp.h"

namespace lmscale {

double overhead_model_seconds(double s, double w, double o, double n_b) { return n_b * o + s / (n_b * w); }
double best_bucket_bytes(double s, double w, double o) { return std::sqrt(s * w * o); }

namespace {

using distributed::DistributedDataParallel;
using distributed::Group;

struct Timing {
  double step_ms = 0, fwd_bwd_ms = 0, exposed_ms = 0, optimizer_ms = 0;
};

// Mean over the timed steps on this rank, then the slowest rank's value for each phase. Marks:
// start | forward+backward | finish (DDP's wait: communication not hidden by backward) | optimizer.
Timing time_steps(TrainingStep& ts, DistributedDataParallel* ddp, const Group& g, int warmup, int steps,
                  bool profile_last, const std::string& trace_path) {
  const auto dev = ts.setup().device;
  StepClock clock(dev);
  std::vector<double> sums(4, 0.0);
  for (int i = 0; i < warmup + steps + (profile_last ? 1 : 0); ++i) {
    const bool profiling = profile_last && i == warmup + steps;
    namespace prof = torch::autograd::profiler;
    const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
    std::set<torch::profiler::impl::ActivityType> activities{torch::profiler::impl::ActivityType::CPU};
    if (dev.is_cuda()) activities.insert(torch::profiler::impl::ActivityType::CUDA);
    if (profiling && !trace_path.empty()) {
      prof::prepareProfiler(config, activities);
      prof::enableProfiler(config, activities);
    }
    clock.clear();
    clock.mark();
    torch::Tensor loss;
    {
      AutocastScope autocast(dev.type(), ts.setup().precision);
      loss = cross_entropy(ts.model()->forward(ts.inputs()), ts.targets());
    }
    loss.backward();
    clock.mark();
    if (ddp) ddp->finish_gradient_synchronization();
    clock.mark();
    ts.optimizer().step();
    clock.mark();
    if (ddp)
      ddp->zero_grad();
    else
      ts.optimizer().zero_grad();
    clock.synchronize();
    if (profiling && !trace_path.empty()) prof::disableProfiler()->save(trace_path);
    if (i < warmup || profiling) continue;
    sums[0] += clock.ms(0, 3);
    sums[1] += clock.ms(0, 1);
    sums[2] += clock.ms(1, 2);
    sums[3] += clock.ms(2, 3);
  }
  for (auto& s : sums) s /= steps;
  auto m = distributed::max_over_ranks(g, sums);
  return {m[0], m[1], m[2], m[3]};
}

// Seconds per all-reduce of `bytes` on the group (mean of several, slowest rank).
double allreduce_seconds(const Group& g, int64_t bytes, int iters) {
  at::Tensor t = at::full({std::max<int64_t>(bytes / 4, 1)}, 1.0f, at::TensorOptions().device(g.device));
  std::vector<at::Tensor> tv{t};
  for (int i = 0; i < 3; ++i) distributed::wait(g.backend->allreduce(tv));
  synchronize(g.device);
  distributed::max_over_ranks(g, {0.0});
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) distributed::wait(g.backend->allreduce(tv));
  synchronize(g.device);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
  return distributed::max_over_ranks(g, {s})[0];
}

struct Config {
  std::string impl;      // single | naive | flat | overlap | bucketed
  double bucket_mb = 0;  // bucketed only
  std::string label() const { return impl == "bucketed" ? impl + "-" + fmt(bucket_mb, bucket_mb < 1 ? 2 : 0) + "MB" : impl; }
};

}  // namespace

std::string run_ddp_bench(const DdpBenchOptions& o) {
  TORCH_CHECK(o.steps >= 1 && o.warmup >= 0, "--steps ", o.steps, " / --warmup ", o.warmup, " must be >= 1 / >= 0.");
  std::vector<Config> configs;
  for (const auto& impl : o.impls) {
    if (impl == "single") {
      configs.push_back({impl});
      continue;
    }
    auto strategy = distributed::parse_ddp_strategy(impl);  // validates the name
    if (strategy == distributed::DdpStrategy::Bucketed)
      for (double mb : o.bucket_mb) configs.push_back({"bucketed", mb});
    else
      configs.push_back({distributed::ddp_strategy_name(strategy)});
  }
  const distributed::DistEnv env = distributed::env_from_environment();
  const auto timeout = distributed::collective_timeout_from_env();
  auto store = distributed::connect_store(env, timeout);
  std::string backend = o.backend;
  if (backend == "auto") backend = torch::cuda::is_available() ? "nccl" : "gloo";
  Group g = distributed::make_group(distributed::parse_backend(backend), store, env, timeout, "ddp");
  c10::OptionalDeviceGuard guard;
  if (g.device.is_cuda()) guard.reset_device(g.device);
  const bool lead = g.rank == 0;
  if (lead) set_run_gpu(g.device.is_cuda() ? device_name(g.device) : "cpu");

  // Overhead model inputs, measured once on this group.
  const double o_s = allreduce_seconds(g, 4, 50);
  const int64_t big = 256LL << 20;
  const double t_big = allreduce_seconds(g, big, 5);
  const double w = big / std::max(t_big - o_s, 1e-9);

  MarkdownTable table({"precision", "impl", "buckets", "step (ms)", "fwd+bwd (ms)", "exposed comm (ms)",
                       "comm share", "vs single", "model overhead (ms)"});
  std::vector<Json> records;
  auto record = [&](const std::string& impl, const std::string& prec, const Config* c, int64_t n_buckets,
                    const char* metric, double value, const char* unit) {
    Json config{{field::size, o.size},       {field::precision, prec},     {field::batch, o.batch},
                {field::context, o.context}, {field::world, g.world_size}, {field::backend, backend},
                {field::device, device_name(g.device)}};
    if (c && c->impl == "bucketed") config[field::bucket_mb] = c->bucket_mb;
    if (n_buckets >= 0) config[field::n_buckets] = n_buckets;
    records.push_back(metric_record("ddp", impl, config, metric, value, unit));
  };

  for (size_t pi = 0; pi < o.precisions.size(); ++pi) {
    const std::string& prec = o.precisions[pi];
    StepSetup setup;
    setup.model = model_config(o.size);
    setup.model.context_length = std::max(setup.model.context_length, o.context);
    setup.batch = o.batch;
    setup.context = o.context;
    setup.precision = parse_dtype(prec);
    setup.device = g.device;
    TrainingStep ts(setup);
    std::vector<at::Tensor> params = ts.model()->parameters(), buffers = ts.model()->buffers();
    double s_bytes = 0;
    for (auto& p : params) s_bytes += p.numel() * p.element_size();
    double single_ms = NAN, best_ms = INFINITY, best_mb = NAN;
    for (const auto& c : configs) {
      if (lead) std::cerr << "[ddp] " << o.size << " " << prec << " " << c.label() << " ..." << std::flush;
      std::unique_ptr<DistributedDataParallel> ddp;
      int64_t n_b = -1;
      Timing t;
      bool oom = false;
      try {
        if (c.impl != "single") {
          distributed::DdpOptions opts;
          opts.strategy = distributed::parse_ddp_strategy(c.impl);
          opts.bucket_mb = c.bucket_mb;
          ddp = std::make_unique<DistributedDataParallel>(params, buffers, g, opts);
          n_b = static_cast<int64_t>(ddp->bucket_assignment().size());
        }
        // Every rank runs the extra (profiled) step so the collectives stay matched; rank 0 records it.
        auto& ti = o.trace_impls;
        const bool trace = pi == 0 && !o.trace_dir.empty() &&
                           (std::find(ti.begin(), ti.end(), c.impl) != ti.end() ||
                            std::find(ti.begin(), ti.end(), c.label()) != ti.end());
        const std::string path = trace && lead ? o.trace_dir + "/ddp_" + c.label() + "_" + prec + ".json" : "";
        t = time_steps(ts, ddp.get(), g, o.warmup, o.steps, trace, path);
      } catch (const std::exception& e) {
        if (!is_out_of_memory(e)) throw;
        oom = true;
      }
      ts.optimizer().zero_grad();  // drop .grad views so the bucket buffers can be freed
      ddp.reset();
      if (oom) {
        release_cached_memory(g.device);
        if (lead) std::cerr << " OOM\n";
        table.add_row({prec, c.label(), "-", "OOM", "-", "-", "-", "-", "-"});
        continue;
      }
      const std::string impl = "lmscale-" + c.impl;
      if (c.impl == "single") single_ms = t.step_ms;
      const double vs_single = (t.step_ms / single_ms - 1) * 100;
      const double model_ms = n_b > 0 ? overhead_model_seconds(s_bytes, w, o_s, double(n_b)) * 1e3 : NAN;
      if (c.impl == "bucketed" && t.step_ms < best_ms) {
        best_ms = t.step_ms;
        best_mb = c.bucket_mb;
      }
      if (lead) std::cerr << " " << fmt(t.step_ms) << " ms/step, exposed comm " << fmt(t.exposed_ms) << " ms\n";
      table.add_row({prec, c.label(), n_b < 0 ? "-" : std::to_string(n_b), fmt(t.step_ms), fmt(t.fwd_bwd_ms),
                     fmt(t.exposed_ms), fmt(100 * t.exposed_ms / t.step_ms, 1) + "%",
                     std::isnan(vs_single) ? "-" : (vs_single >= 0 ? "+" : "") + fmt(vs_single, 1) + "%",
                     (c.impl == "bucketed" && !std::isnan(model_ms)) ? fmt(model_ms) : "-"});
      record(impl, prec, &c, n_b, "step_ms", t.step_ms, "ms");
      record(impl, prec, &c, n_b, "fwd_bwd_ms", t.fwd_bwd_ms, "ms");
      record(impl, prec, &c, n_b, "exposed_comm_ms", t.exposed_ms, "ms");
      record(impl, prec, &c, n_b, "optimizer_ms", t.optimizer_ms, "ms");
      if (!std::isnan(vs_single)) record(impl, prec, &c, n_b, "overhead_vs_single", vs_single, "%");
      if (c.impl == "bucketed") record(impl, prec, &c, n_b, "model_overhead_ms", model_ms, "ms");
    }
    const double pred = best_bucket_bytes(s_bytes, w, o_s) / (1 << 20);
    record("overhead-model", prec, nullptr, -1, "per_call_overhead", o_s * 1e6, "us");
    record("overhead-model", prec, nullptr, -1, "allreduce_bandwidth", w / 1e9, "GB/s");
    record("overhead-model", prec, nullptr, -1, "gradient_bytes", s_bytes, "bytes");
    record("overhead-model", prec, nullptr, -1, "predicted_best_bucket", pred, "MB");
    if (!std::isnan(best_mb)) record("overhead-model", prec, nullptr, -1, "measured_best_bucket", best_mb, "MB");
    table.add_row({prec, "model: o=" + fmt(o_s * 1e6, 1) + "us w=" + fmt(w / 1e9, 1) + "GB/s s=" + fmt_bytes(s_bytes),
                   "-", "-", "-", "-", "-", "-",
                   "best bucket " + fmt(pred, 1) + " MB (measured " + (std::isnan(best_mb) ? "-" : fmt(best_mb, best_mb < 1 ? 2 : 0)) +
                       " MB)"});
  }
  if (!lead) return "";
  append_jsonl(o.out + "/ddp.jsonl", records);
  write_text(o.out + "/ddp.md", "# bench ddp\n\n`" + run_info().command + "` (" + run_info().date + ", " +
                                    run_info().gpu + ", commit " + run_info().commit + ")\n\n" + table.render());
  return table.render();
}

}  // namespace lmscale
