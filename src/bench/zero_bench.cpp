// ZeRO memory/time benchmark; see zero_bench.h. unsharded, zero1 and zero2 run the default step
// (fused kernels, the step's fused AdamW; distributed/data_parallel.h), so their ratio isolates sharding;
// zero1-broadcast and zero1-reduce-scatter are the assignment's ZeRO-1 around libtorch's AdamW.
#include "bench/zero_bench.h"

#include <c10/core/DeviceGuard.h>
#include <torch/torch.h>

#include <iostream>
#include <set>

#include "core/autocast.h"
#include "core/device.h"
#include "core/error.h"
#include "core/stats.h"
#include "core/step_times_note.h"
#include "core/sweep_progress.h"
#include "core/timer.h"
#include "distributed/ddp.h"
#include "distributed/fault.h"
#include "distributed/sharded_optimizer.h"
#include "distributed/data_parallel.h"
#include "results/table.h"
#include "results/writer.h"
#include "train/training_step.h"

namespace lmscale {
namespace {

using distributed::Group;

struct Measured {
  double init = 0, before_step = 0, after_step = 0, peak = 0;  // bytes, slowest (largest) rank
  double params = 0, grads = 0, state = 0;
  double step_ms = 0;
  int consistency_checks = 0;  // cross-rank parameter checks passed
  Summary steps;               // each timed step's time (slowest rank), for the noise guard
};

int64_t tensor_bytes(const std::vector<at::Tensor>& ts) {
  int64_t b = 0;
  for (auto& t : ts)
    if (t.defined()) b += t.numel() * static_cast<int64_t>(t.element_size());
  return b;
}

// The designs on the default step (distributed/data_parallel.h): unsharded = bucketed DDP with every rank
// running the step's fused AdamW; zero1 / zero2 = the distributed optimizer's layouts.
bool on_the_step(const std::string& impl) { return impl == "unsharded" || impl == "zero1" || impl == "zero2"; }

Measured run_config(const std::string& impl, const ZeroBenchOptions& o, const Group& g) {
  const c10::Device dev = g.device;
  release_cached_memory(dev);
  reset_peak_memory(dev);
  StepSetup setup = o.step;
  setup.device = dev;
  Measured m;
  TrainingStep ts(setup);  // its FusedAdamW allocates state lazily: never stepped by the sharded designs
  std::vector<at::Tensor> params = ts.model()->parameters();
  synchronize(dev);
  m.init = double(memory_stats(dev).allocated);
  m.params = double(tensor_bytes(params)) + double(tensor_bytes(ts.bf16_copies()));

  // The default step's designs, or the assignment's ZeRO-1 over libtorch's AdamW (ShardedOptimizer).
  std::unique_ptr<distributed::DataParallelStep> dp;
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
  std::unique_ptr<distributed::ShardedOptimizer> sharded;
  if (on_the_step(impl)) {
    distributed::DataParallelOptions dpo;
    dpo.bucket_mb = o.bucket_mb;
    dp = distributed::make_data_parallel(impl == "unsharded" ? "bucketed" : impl, ts, g, dpo);
  } else {
    if (impl == "zero1-broadcast") ddp = std::make_unique<distributed::DistributedDataParallel>(params, ts.model()->buffers(), g);
    auto mode = impl == "zero1-broadcast" ? distributed::ZeroMode::BroadcastOwners : distributed::ZeroMode::ReduceScatter;
    sharded = std::make_unique<distributed::ShardedOptimizer>(std::vector<torch::optim::OptimizerParamGroup>{params},
                                                              distributed::adamw_factory(
                                                                  torch::optim::AdamWOptions(1e-3).weight_decay(0.01)),
                                                              g, mode);
  }
  int checks = 0;
  StepClock clock(dev);
  double total_ms = 0;
  std::vector<double> step_series;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    reset_peak_memory(dev);
    clock.clear();
    clock.mark();
    if (dp) {
      ts.forward(StepMode::TrainStep);
      ts.backward();
      dp->synchronize();
    } else {
      {
        AutocastScope autocast(dev.type(), setup.precision);
        cross_entropy(ts.model()->forward(ts.inputs()), ts.targets()).backward();
      }
      if (ddp) ddp->finish_gradient_synchronization();
    }
    synchronize(dev);
    const double before = double(memory_stats(dev).allocated);
    if (dp) dp->step();
    else sharded->step();
    clock.mark();
    clock.synchronize();
    const auto after = memory_stats(dev);
    if (dp) dp->zero_grad();
    else if (ddp) ddp->zero_grad();
    else sharded->zero_grad();
    if (dp) dp->wait_for_parameters();  // what is compared below is current, not still arriving
    // What the forward reads: the bf16 copies for the designs on the step, the parameters for libtorch's.
    std::vector<std::pair<std::string, at::Tensor>> named;
    if (dp) named = distributed::forward_weights(ts);
    else
      for (const auto& item : ts.model()->named_parameters()) named.emplace_back(item.key(), item.value());
    distributed::inject_divergence(g, named, i + 1, setup.model.name, setup.context);
    if (o.check_consistency > 0 && (i + 1) % o.check_consistency == 0) {
      distributed::check_parameter_consistency(g, named, i + 1);
      ++checks;
    }
    if (i < o.warmup) continue;
    total_ms += clock.ms(0, 1);
    step_series.push_back(clock.ms(0, 1));
    m.before_step = before;
    m.after_step = double(after.allocated);
    m.peak = double(after.peak_allocated);
  }
  ts.release_loss();
  m.step_ms = total_ms / o.steps;
  if (dp) {
    m.grads = double(dp->grad_bytes());
    m.state = double(dp->state_bytes());
  } else {
    // Gradients: DDP's bucket buffers, or mode 2's flat buffer plus its 1/N shard buffer.
    std::vector<at::Tensor> grads;
    for (auto& p : params) grads.push_back(p.grad());
    m.grads = double(tensor_bytes(grads));
    if (sharded->mode() == distributed::ZeroMode::ReduceScatter)
      for (auto& grp : sharded->local().param_groups())
        for (auto& p : grp.params()) m.grads += double(tensor_bytes({p.grad()}));
    m.state = double(sharded->state_bytes());
  }
  auto mx = distributed::max_over_ranks(g, {m.init, m.before_step, m.after_step, m.peak, m.params, m.grads, m.state, m.step_ms});
  Measured r{mx[0], mx[1], mx[2], mx[3], mx[4], mx[5], mx[6], mx[7], checks,
             summarize(distributed::max_over_ranks(g, step_series))};
  dp.reset();
  ts.optimizer().zero_grad();
  return r;
}

}  // namespace

std::string run_zero_bench(const ZeroBenchOptions& o) {
  check_output_folder(o.out);  // before the first measurement, not after it
  for (const auto& impl : o.impls)
    TORCH_CHECK(on_the_step(impl) || impl == "zero1-broadcast" || impl == "zero1-reduce-scatter", "--impls '", impl,
                "' is unknown; choose unsharded, zero1, zero2, zero1-broadcast, zero1-reduce-scatter.");
  const distributed::DistEnv env = distributed::env_from_environment();
  distributed::require_several_ranks(env, "bench zero");
  const auto timeout = distributed::collective_timeout_from_env();
  auto store = distributed::connect_store(env, timeout);
  std::string backend = o.backend == "auto" ? (torch::cuda::is_available() ? "nccl" : "gloo") : o.backend;
  Group g = distributed::make_group(distributed::parse_backend(backend), store, env, timeout, "zero");
  // Constructed with its device (not reset later): GCC's -Wmaybe-uninitialized misreads the reset.
  c10::OptionalDeviceGuard guard(g.device.is_cuda() ? std::optional<c10::Device>(g.device) : std::nullopt);
  if (g.device.is_cuda()) {
    // The caching allocator of a device that never allocated rejects stats calls ("did you call
    // init?"): on ranks > 0 nothing has touched cuda:LOCAL_RANK yet.
    at::empty({1}, at::TensorOptions().device(g.device));
  }
  const bool lead = g.rank == 0;
  if (lead) set_run_gpu(g.device.is_cuda() ? device_name(g.device) : "cpu");

  int noisy = 0;  // step times the noise guard (core/stats.h) does not trust, and why
  std::set<std::string> noise_why;
  MarkdownTable table({"impl", "after init", "before step", "after step", "peak", "params", "grads", "optimizer state",
                       "step (ms)", "vs unsharded"});
  std::vector<Json> records;
  double base_ms = NAN;
  for (const auto& impl : o.impls) {
    const std::string precision = dtype_name(o.step.precision);
    OpenLine line(std::cerr, lead, "[zero] " + o.step.model.name + " " + precision + " " + impl);
    Record cell("zero", "lmscale-" + impl);
    cell.update(Json{{field::size, o.step.model.name},  {field::precision, precision}, {field::batch, o.step.batch},
                     {field::context, o.step.context}, {field::world, g.world_size}, {field::backend, backend},
                     {field::device, device_name(g.device)},      {field::fused, o.step.fused}});
    Measured m;
    try {
      m = run_config(impl, o, g);
    } catch (const std::exception& e) {
      if (!is_out_of_memory(e)) throw;
      records.push_back(cell.set_status(Status::oom, error_message(e).substr(0, error_message(e).find('\n'))).failure());
      release_cached_memory(g.device);
      line.close("OOM");
      table.add_row({impl, "OOM", "-", "-", "-", "-", "-", "-", "-", "-"});
      continue;
    }
    if (o.check_consistency > 0) cell.set(field::consistency_checks, m.consistency_checks);
    if (impl == "unsharded") base_ms = m.step_ms;
    const double ratio = m.step_ms / base_ms;
    line.close(fmt(m.step_ms) + " ms, state " + fmt_bytes(m.state));
    // The allocator's statistics exist on CUDA only: on the CPU those columns say so instead of 0 B.
    auto allocated = [&](double bytes) { return g.device.is_cuda() ? fmt_bytes(bytes) : std::string("n/a"); };
    const std::string noise = noise_problem(m.steps);
    if (!noise.empty()) noise_why.insert(noise);
    noisy += !noise.empty();
    table.add_row({impl, allocated(m.init), allocated(m.before_step), allocated(m.after_step), allocated(m.peak),
                   fmt_bytes(m.params), fmt_bytes(m.grads), fmt_bytes(m.state),
                   fmt(m.step_ms) + (m.steps.n > 1 ? " ± " + fmt(m.steps.std) : "") + (noise.empty() ? "" : " ⚠"),
                   std::isnan(ratio) ? "-" : fmt(ratio, 3) + "x"});
    for (auto [metric, value, unit] : std::vector<std::tuple<const char*, double, const char*>>{
             {"allocated_after_init", m.init, "bytes"},
             {"allocated_before_step", m.before_step, "bytes"},
             {"allocated_after_step", m.after_step, "bytes"},
             {"peak_allocated", m.peak, "bytes"},
             {"param_bytes", m.params, "bytes"},
             {"grad_bytes", m.grads, "bytes"},
             {"optimizer_state_bytes", m.state, "bytes"},
             {"step_ms", m.step_ms, "ms"}}) {
      // The CPU has no allocator statistics: no record claims any.
      if (!g.device.is_cuda() && std::string(metric).find("allocated") != std::string::npos) continue;
      Record r = cell;
      if (std::string(metric) == "step_ms")
        r.update(Json{{field::std_dev, m.steps.std}, {field::median, m.steps.median}, {field::min, m.steps.min},
                      {field::max, m.steps.max}, {field::n, m.steps.n}});
      records.push_back(r.metric(metric, value, unit));
    }
  }
  if (!lead) return "";
  append_jsonl(o.out + "/zero.jsonl", records);
  const std::string note = step_times_note(noisy, noise_why, o.steps, g.device.is_cuda());
  write_text(o.out + "/zero.md", "# bench zero\n\n`" + run_info().command + "` (" + run_info().date + ", " +
                                     run_info().gpu + ", commit " + run_info().commit + ")\n\nPer rank, largest rank " +
                                     "shown; world " + std::to_string(g.world_size) + ".\n\n" + table.render() + note);
  return table.render() + note;
}

}  // namespace lmscale
