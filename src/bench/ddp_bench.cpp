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
#include <cstdio>
#include <cmath>
#include <iostream>
#include <set>

#include "core/autocast.h"
#include "core/device.h"
#include "core/error.h"
#include "core/stats.h"
#include "core/step_times_note.h"
#include "core/sweep_progress.h"
#include "core/timer.h"
#include "distributed/data_parallel.h"
#include "distributed/ddp.h"
#include "distributed/fault.h"
#include "results/table.h"
#include "results/writer.h"
#include "train/training_step.h"

namespace lmscale {

double overhead_model_seconds(double s, double w, double o, double n_b) { return n_b * o + s / (n_b * w); }
double best_bucket_bytes(double s, double w, double o) { return std::sqrt(s * w * o); }

namespace {

using distributed::DistributedDataParallel;
using distributed::Group;

struct Timing {
  double step_ms = 0, fwd_bwd_ms = 0, exposed_ms = 0, optimizer_ms = 0, backward_ms = 0, peak_bytes = 0;
  int consistency_checks = 0;  // cross-rank parameter checks passed (--check-consistency)
  Summary steps;               // the step time of each timed step (slowest rank), for the noise guard
};

// Mean of one value per rank (an all-reduce SUM on the group's device).
double mean_over_ranks(const Group& g, double v) {
  at::Tensor t = at::full({1}, v, at::TensorOptions().dtype(at::kDouble).device(g.device));
  std::vector<at::Tensor> tv{t};
  distributed::wait_explained(g.backend->allreduce(tv), g, "bench ddp", "all-reduce of the loss", -1);
  return t.cpu().item<double>() / g.world_size;
}

// The default training step (TrainingStep's forward and backward: fused kernels, fused loss) with a
// data-parallel design around it. Mean over the timed steps on this rank, then the slowest rank's
// value for each phase. Marks: start | forward | backward | synchronize (the wait: communication not
// hidden by backward) | optimizer. check_every > 0: after every check_every-th step the weights the
// forward reads are compared across ranks.
Timing time_steps(TrainingStep& ts, distributed::DataParallelStep& dp, const Group& g, int warmup, int steps,
                  bool profile_last, const std::string& trace_path, bool trace_gpu_only, int check_every,
                  int loss_every, std::vector<std::pair<int, double>>* losses) {
  const auto dev = ts.setup().device;
  StepClock clock(dev);
  std::vector<double> sums(5, 0.0), step_series;
  int checks = 0;
  for (int i = 0; i < warmup + steps + (profile_last ? 1 : 0); ++i) {
    const bool profiling = profile_last && i == warmup + steps;
    namespace prof = torch::autograd::profiler;
    const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
    std::set<torch::profiler::impl::ActivityType> activities;
    if (!(trace_gpu_only && dev.is_cuda())) activities.insert(torch::profiler::impl::ActivityType::CPU);
    if (dev.is_cuda()) activities.insert(torch::profiler::impl::ActivityType::CUDA);
    if (profiling && !trace_path.empty()) {
      prof::prepareProfiler(config, activities);
      prof::enableProfiler(config, activities);
    }
    if (i == warmup) reset_peak_memory(dev);
    clock.clear();
    clock.mark();
    ts.forward(StepMode::TrainStep);
    clock.mark();
    ts.backward();
    clock.mark();
    dp.synchronize();
    clock.mark();
    dp.step();
    clock.mark();
    dp.zero_grad();
    clock.synchronize();
    if (profiling && !trace_path.empty()) prof::disableProfiler()->save(trace_path);
    auto named = distributed::forward_weights(ts);
    // The single design runs each rank alone: nothing keeps its weights equal to the others'.
    const bool check = check_every > 0 && (i + 1) % check_every == 0 && dp.name() != "single";
    if (check || i == 0) dp.wait_for_parameters();  // what is read below is current, not still arriving
    distributed::inject_divergence(g, named, i + 1, ts.setup().model.name, ts.setup().context);
    if (check) {
      distributed::check_parameter_consistency(g, named, i + 1);
      ++checks;
    }
    if (loss_every > 0 && (i % loss_every == 0 || i + 1 == warmup + steps))
      losses->emplace_back(i, mean_over_ranks(g, ts.last_loss().detach().to(at::kDouble).cpu().item<double>()));
    if (i < warmup || profiling) continue;
    sums[0] += clock.ms(0, 4);
    step_series.push_back(clock.ms(0, 4));
    sums[1] += clock.ms(0, 2);
    sums[2] += clock.ms(2, 3);
    sums[3] += clock.ms(3, 4);
    sums[4] += clock.ms(1, 2);
  }
  ts.release_loss();
  for (auto& s : sums) s /= steps;
  sums.push_back(double(memory_stats(dev).peak_allocated));
  auto m = distributed::max_over_ranks(g, sums);
  return {m[0], m[1], m[2], m[3], m[4], m[5], checks, summarize(distributed::max_over_ranks(g, step_series))};
}

// Seconds per all-reduce of `bytes` on the group (mean of several, slowest rank).
double allreduce_seconds(const Group& g, int64_t bytes, int iters) {
  at::Tensor t = at::full({std::max<int64_t>(bytes / 4, 1)}, 1.0f, at::TensorOptions().device(g.device));
  std::vector<at::Tensor> tv{t};
  const std::string what = "all-reduce of " + std::to_string(bytes) + " bytes (overhead model)";
  distributed::run_explained(g, "bench ddp", what, -1, [&] {
    for (int i = 0; i < 3; ++i) distributed::wait(g.backend->allreduce(tv));
  });
  synchronize(g.device);
  distributed::max_over_ranks(g, {0.0});
  auto start = std::chrono::steady_clock::now();
  distributed::run_explained(g, "bench ddp", what, -1, [&] {
    for (int i = 0; i < iters; ++i) distributed::wait(g.backend->allreduce(tv));
  });
  synchronize(g.device);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
  return distributed::max_over_ranks(g, {s})[0];
}

struct Config {
  std::string impl;      // a design of distributed::data_parallel_designs()
  double bucket_mb = 0;  // bucketed, zero1 and zero2
  std::string comm_dtype = "fp32";
  bool bucketed() const { return impl == "bucketed" || impl == "zero1" || impl == "zero2"; }
  bool sharded() const { return impl == "zero1" || impl == "zero2"; }
  std::string label() const {
    std::string l = bucketed() ? impl + "-" + fmt(bucket_mb, bucket_mb < 1 ? 2 : 0) + "MB" : impl;
    return comm_dtype == "fp32" ? l : l + "-" + comm_dtype;
  }
};

}  // namespace

std::string run_ddp_bench(const DdpBenchOptions& o) {
  check_output_folder(o.out);  // before the first measurement, not after it
  TORCH_CHECK(o.steps >= 1 && o.warmup >= 0, "--steps ", o.steps, " / --warmup ", o.warmup, " must be >= 1 / >= 0.");
  TORCH_CHECK(o.check_consistency >= 0, "--check-consistency ", o.check_consistency, " must be >= 0 (0: off).");
  for (const auto& d : o.comm_dtypes) distributed::parse_comm_dtype(d);  // validates
  std::vector<Config> configs;
  for (const auto& impl : o.impls) {
    distributed::check_data_parallel_design(impl);
    if (impl == "single") {
      configs.push_back({impl});
      continue;
    }
    for (const auto& dtype : o.comm_dtypes) {
      if (impl == "bucketed" || impl == "zero1" || impl == "zero2")
        for (double mb : o.bucket_mb) configs.push_back({impl, mb, dtype});
      else
        configs.push_back({impl, 0, dtype});
    }
  }
  const distributed::DistEnv env = distributed::env_from_environment();
  distributed::require_several_ranks(env, "bench ddp");
  const auto timeout = distributed::collective_timeout_from_env();
  auto store = distributed::connect_store(env, timeout);
  std::string backend = o.backend;
  if (backend == "auto") backend = torch::cuda::is_available() ? "nccl" : "gloo";
  auto nccl = distributed::nccl_tuning_from_env();
  if (o.nccl_max_ctas > 0) nccl.max_ctas = o.nccl_max_ctas;
  if (o.nccl_min_ctas > 0) nccl.min_ctas = o.nccl_min_ctas;
  if (o.nccl_high_priority) nccl.high_priority_stream = true;
  Group g = distributed::make_group(distributed::parse_backend(backend), store, env, timeout, "ddp", nccl);
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
                       "comm share", "vs single", "bwd slowdown", "sent/step", "peak mem", "optimizer state",
                       "model overhead (ms)"});
  std::vector<Json> records;
  Json cell_extra = Json::object();  // fields of the cell being recorded (the consistency checks it passed)
  auto record = [&](const std::string& impl, const std::string& prec, const Config* c, int64_t n_buckets,
                    const char* metric, double value, const char* unit, const Json& extra = Json::object()) {
    Json config{{field::size, o.step.model.name},  {field::precision, prec},     {field::batch, o.step.batch},
                {field::context, o.step.context}, {field::world, g.world_size}, {field::backend, backend},
                {field::device, device_name(g.device)},      {field::fused, o.step.fused},
                {field::nccl, distributed::describe(nccl)}};
    if (c && c->bucketed()) config[field::bucket_mb] = c->bucket_mb;
    if (c && c->bucketed() && o.first_bucket_mb >= 0) config[field::first_bucket_mb] = o.first_bucket_mb;
    if (c && c->impl != "single") config[field::comm_dtype] = c->comm_dtype;
    if (n_buckets >= 0) config[field::n_buckets] = n_buckets;
    config.update(cell_extra);
    config.update(extra);
    records.push_back(Record("ddp", impl).update(config).metric(metric, value, unit));
  };

  std::vector<std::pair<int, double>> losses;
  std::vector<std::pair<std::string, std::vector<std::pair<int, double>>>> curves;
  int noisy = 0;  // cells the noise guard does not trust (core/stats.h), and why
  std::set<std::string> noise_why;  // (design, (step, loss))
  for (size_t pi = 0; pi < o.precisions.size(); ++pi) {
    const std::string& prec = o.precisions[pi];
    StepSetup setup = o.step;  // default: the fastest single-device step (fused kernels where they exist)
    setup.precision = parse_dtype(prec);
    setup.device = g.device;
    // Loss curves: each rank its own data, and every design from the same fresh model.
    if (o.loss_every > 0) setup.seed = static_cast<uint64_t>(g.rank);
    auto ts_owner = std::make_unique<TrainingStep>(setup);
    std::vector<at::Tensor> params = ts_owner->model()->parameters();
    double s_bytes = 0;
    for (auto& p : params) s_bytes += p.numel() * p.element_size();
    double single_ms = NAN, single_bwd_ms = NAN, best_ms = INFINITY, best_mb = NAN;
    for (const auto& c : configs) {
      // Every design from a fresh step: no optimizer state (which differs per rank after `single`) and no
      // parameter layout (the sharded designs re-point parameters into their buckets) carries over.
      if (&c != &configs.front()) {
        ts_owner.reset();
        release_cached_memory(g.device);
        ts_owner = std::make_unique<TrainingStep>(setup);
      }
      TrainingStep& ts = *ts_owner;
      OpenLine line(std::cerr, lead, "[ddp] " + o.step.model.name + " " + prec + " " + c.label());
      std::unique_ptr<distributed::DataParallelStep> dp;
      int64_t n_b = -1, state_bytes = 0, grad_bytes = 0;
      double sent_bytes = 0;  // per rank per step, ring algorithms (Note [bus bandwidth] in comm_bench.cpp)
      const double n = g.world_size;
      Timing t;
      bool oom = false;
      try {
        distributed::DataParallelOptions dpo;
        dpo.bucket_mb = c.bucket_mb;
        dpo.first_bucket_mb = o.first_bucket_mb;
        dpo.comm_dtype = distributed::parse_comm_dtype(c.comm_dtype);
        dp = distributed::make_data_parallel(c.impl, ts, g, dpo);
        if (c.impl != "single") {
          n_b = dp->buckets();
          // All-reduce: 2(n-1)/n of the payload; reduce-scatter + all-gather: (n-1)/n of each.
          sent_bytes = double(dp->payload_bytes_per_step()) * (c.sharded() ? 1 : 2) * (n - 1) / n;
        }
        // Every rank runs the extra (profiled) step so the collectives stay matched; rank 0 records it.
        auto& ti = o.trace_impls;
        const bool trace = pi == 0 && !o.trace_dir.empty() &&
                           (std::find(ti.begin(), ti.end(), c.impl) != ti.end() ||
                            std::find(ti.begin(), ti.end(), c.label()) != ti.end());
        const std::string path = trace && lead ? o.trace_dir + "/ddp_" + c.label() + "_" + prec + ".json" : "";
        losses.clear();
        t = time_steps(ts, *dp, g, o.warmup, o.steps, trace, path, o.trace_gpu_only, o.check_consistency, o.loss_every,
                       &losses);
        state_bytes = dp->state_bytes();
        grad_bytes = dp->grad_bytes();
        if (o.loss_every > 0) curves.emplace_back(prec + " " + c.label(), losses);
      } catch (const std::exception& e) {
        if (!is_out_of_memory(e)) throw;
        oom = true;
      }
      dp.reset();
      if (oom) {
        release_cached_memory(g.device);
        line.close("OOM");
        table.add_row({prec, c.label(), "-", "OOM", "-", "-", "-", "-", "-", "-", "-", "-", "-"});
        continue;
      }
      const std::string impl = "lmscale-" + c.impl;
      cell_extra = o.check_consistency > 0 ? Json{{field::consistency_checks, t.consistency_checks}} : Json::object();
      if (c.impl == "single") {
        single_ms = t.step_ms;
        single_bwd_ms = t.backward_ms;
      }
      const double vs_single = (t.step_ms / single_ms - 1) * 100;
      const double bwd_slowdown = (t.backward_ms / single_bwd_ms - 1) * 100;
      auto percent = [](double v) { return std::isnan(v) ? std::string("-") : (v >= 0 ? "+" : "") + fmt(v, 1) + "%"; };
      const double model_ms = n_b > 0 ? overhead_model_seconds(s_bytes, w, o_s, double(n_b)) * 1e3 : NAN;
      if (c.impl == "bucketed" && c.comm_dtype == "fp32" && t.step_ms < best_ms) {
        best_ms = t.step_ms;
        best_mb = c.bucket_mb;
      }
      line.close(fmt(t.step_ms) + " ms/step, exposed comm " + fmt(t.exposed_ms) + " ms");
      const std::string noise = noise_problem(t.steps);
      if (!noise.empty()) noise_why.insert(noise);
      noisy += !noise.empty();
      table.add_row({prec, c.label(), n_b < 0 ? "-" : std::to_string(n_b),
                     fmt(t.step_ms) + (t.steps.n > 1 ? " ± " + fmt(t.steps.std) : "") + (noise.empty() ? "" : " ⚠"),
                     fmt(t.fwd_bwd_ms),
                     fmt(t.exposed_ms), fmt(100 * t.exposed_ms / t.step_ms, 1) + "%",
                     percent(vs_single), c.impl == "single" ? "-" : percent(bwd_slowdown),
                     c.impl == "single" ? "-" : fmt_bytes(sent_bytes), t.peak_bytes > 0 ? fmt_bytes(t.peak_bytes) : "-",
                     fmt_bytes(double(state_bytes)),
                     (c.impl == "bucketed" && c.comm_dtype == "fp32" && !std::isnan(model_ms)) ? fmt(model_ms) : "-"});
      record(impl, prec, &c, n_b, "step_ms", t.step_ms, "ms",
             Json{{field::std_dev, t.steps.std}, {field::median, t.steps.median}, {field::min, t.steps.min},
                  {field::max, t.steps.max}, {field::n, t.steps.n}});
      record(impl, prec, &c, n_b, "fwd_bwd_ms", t.fwd_bwd_ms, "ms");
      record(impl, prec, &c, n_b, "exposed_comm_ms", t.exposed_ms, "ms");
      record(impl, prec, &c, n_b, "optimizer_ms", t.optimizer_ms, "ms");
      record(impl, prec, &c, n_b, "backward_ms", t.backward_ms, "ms");
      if (c.impl != "single" && !std::isnan(bwd_slowdown)) record(impl, prec, &c, n_b, "backward_slowdown", bwd_slowdown, "%");
      if (c.impl != "single") record(impl, prec, &c, n_b, "bytes_sent_per_step", sent_bytes, "bytes");
      if (t.peak_bytes > 0) record(impl, prec, &c, n_b, "peak_allocated", t.peak_bytes, "bytes");
      record(impl, prec, &c, n_b, "optimizer_state_bytes", double(state_bytes), "bytes");
      record(impl, prec, &c, n_b, "grad_bytes", double(grad_bytes), "bytes");
      if (!std::isnan(vs_single)) record(impl, prec, &c, n_b, "overhead_vs_single", vs_single, "%");
      for (const auto& [step, loss] : losses) record(impl, prec, &c, n_b, "loss", loss, "nats", Json{{field::step, step}});
      if (c.impl == "bucketed") record(impl, prec, &c, n_b, "model_overhead_ms", model_ms, "ms");
    }
    const double pred = best_bucket_bytes(s_bytes, w, o_s) / (1 << 20);
    record("overhead-model", prec, nullptr, -1, "per_call_overhead", o_s * 1e6, "us");
    record("overhead-model", prec, nullptr, -1, "allreduce_bandwidth", w / 1e9, "GB/s");
    record("overhead-model", prec, nullptr, -1, "gradient_bytes", s_bytes, "bytes");
    record("overhead-model", prec, nullptr, -1, "predicted_best_bucket", pred, "MB");
    if (!std::isnan(best_mb)) record("overhead-model", prec, nullptr, -1, "measured_best_bucket", best_mb, "MB");
    table.add_row({prec, "model: o=" + fmt(o_s * 1e6, 1) + "us w=" + fmt(w / 1e9, 1) + "GB/s s=" + fmt_bytes(s_bytes),
                   "-", "-", "-", "-", "-", "-", "-", "-", "-", "-",
                   "best bucket " + fmt(pred, 1) + " MB (measured " + (std::isnan(best_mb) ? "-" : fmt(best_mb, best_mb < 1 ? 2 : 0)) +
                       " MB)"});
  }
  if (!lead) return "";
  append_jsonl(o.out + "/ddp.jsonl", records);
  if (!curves.empty()) {
    // One row per recorded step, one column per design, plus each design's largest gap to the first.
    std::vector<std::string> head{"step"};
    for (const auto& [name, curve] : curves) head.push_back(name);
    MarkdownTable losses_table(head);
    for (size_t k = 0; k < curves.front().second.size(); ++k) {
      std::vector<std::string> row{std::to_string(curves.front().second[k].first)};
      for (const auto& [name, curve] : curves) row.push_back(k < curve.size() ? fmt(curve[k].second, 6) : "-");
      losses_table.add_row(row);
    }
    std::vector<std::string> gap{"max abs difference to " + curves.front().first};
    for (const auto& [name, curve] : curves) {
      double worst = 0;
      for (size_t k = 0; k < curve.size() && k < curves.front().second.size(); ++k)
        worst = std::max(worst, std::abs(curve[k].second - curves.front().second[k].second));
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.2e", worst);
      gap.push_back(buf);
    }
    losses_table.add_row(gap);
    write_text(o.out + "/ddp_loss.md", "# bench ddp: training loss per design\n\n`" + run_info().command + "` (" +
                                           run_info().date + ", " + run_info().gpu + ", commit " + run_info().commit +
                                           ")\n\nMean loss over " + std::to_string(g.world_size) +
                                           " ranks, each on its own batch, every design from the same initial model.\n\n" +
                                           losses_table.render());
  }
  // How the times were taken, and the noise guard's verdict on the step column.
  const std::string note = step_times_note(noisy, noise_why, o.steps, g.device.is_cuda());
  write_text(o.out + "/ddp.md", "# bench ddp\n\n`" + run_info().command + "` (" + run_info().date + ", " +
                                    run_info().gpu + ", commit " + run_info().commit + ")\n\n" + table.render() + note);
  return table.render() + note;
}

}  // namespace lmscale
