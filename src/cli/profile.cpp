// `lmscale profile`: where the time of one training step goes, kernel by kernel, for forward,
// backward and optimizer separately, with the attention sub-parts; writes <out>/profile.jsonl,
// <out>/profile.md and optionally a Perfetto trace. The measuring is bench/profile_run.
#include <iostream>

#include "profile/profile_run.h"
#include "cli/registry.h"
#include "core/device.h"
#include "core/record.h"
#include "core/results.h"
#include "model/config.h"

namespace {

using namespace lmscale;

struct ProfileArgs {
  std::string size = "small", precision = "fp32", attention = "naive", device = "auto", trace, out = "results";
  int64_t context = 512, batch = 4;
  int warmup = 2, steps = 3, top = 10;
};

void run(const ProfileArgs& a) {
  ProfileOptions o;
  o.setup.model = model_config(a.size);
  o.setup.model.attention = parse_attention_backend(a.attention);
  o.setup.model.context_length = std::max(o.setup.model.context_length, a.context);
  o.setup.context = a.context;
  o.setup.batch = a.batch;
  o.setup.precision = parse_dtype(a.precision);
  o.setup.device = resolve_device(a.device);
  o.warmup = a.warmup;
  o.steps = a.steps;
  o.trace_path = a.trace;
  TORCH_CHECK(a.top >= 1, "--top ", a.top, " must be at least 1 (rows per phase)");
  set_run_gpu(device_name(o.setup.device));
  const bool gpu = o.setup.device.is_cuda();
  std::cout << "profiling " << a.size << " context " << a.context << " batch " << a.batch << " " << a.precision
            << " attention " << a.attention << " on " << device_name(o.setup.device) << ": " << a.warmup
            << " warm-up + " << a.steps << " profiled steps\n";
  ProfileReport r = run_profile(o);

  Record base("profile", "lmscale-" + a.attention);
  base.update(Json{{field::size, a.size},           {field::context, a.context},   {field::batch, a.batch},
                   {field::precision, a.precision}, {field::attention, a.attention},
                   {field::device, o.setup.device.str()},                         {field::steps, a.steps},
                   {field::time_kind, gpu ? "gpu-kernel" : "cpu-self"}});
  std::vector<Json> records;
  const std::string what = gpu ? "kernel" : "CPU op";
  std::string md = "# Kernel profile: " + a.size + ", context " + std::to_string(a.context) + ", batch " +
                   std::to_string(a.batch) + ", " + a.precision + ", attention " + a.attention + "\n\n" +
                   "Device: " + run_info().gpu + ". Times per step, averaged over " + std::to_string(a.steps) +
                   " profiled steps after " + std::to_string(a.warmup) + " warm-up steps; " +
                   (gpu ? "GPU kernel durations from Kineto/CUPTI." : "CPU op self times (no GPU in this run).") +
                   " Wall time includes a device sync and profiler overhead.\n\n";
  for (size_t p = 0; p < r.phases.size(); ++p) {
    const auto& ph = r.phases[p];
    // Launches per step: what a launch-bound step pays for on the CPU, whatever each kernel takes.
    double calls = 0;
    for (const auto& s : ph.ops) calls += s.calls_per_step;
    Record phase = base;
    phase.update(Json{{field::phase, ph.phase}, {"wall_ms", r.wall_ms[p]}, {"distinct_ops", ph.ops.size()},
                      {"calls_per_step", calls}});
    records.push_back(phase.metric("phase_total_ms", ph.total_ms_per_step, "ms"));
    MarkdownTable t({"#", what, "calls/step", "ms/step", "share"});
    for (size_t i = 0; i < ph.ops.size() && i < static_cast<size_t>(a.top); ++i) {
      const auto& s = ph.ops[i];
      t.add_row({std::to_string(i + 1), "`" + short_kernel_name(s.name) + "`", fmt(s.calls_per_step, 1),
                 fmt(s.ms_per_step, 3), fmt(100 * s.share, 1) + "%"});
      Record kernel = base;
      kernel.update(Json{{field::phase, ph.phase}, {field::position, i + 1}, {field::kernel, s.name},
                         {"calls_per_step", s.calls_per_step}, {"share", s.share}});
      records.push_back(kernel.metric("kernel_ms", s.ms_per_step, "ms"));
    }
    md += "## " + ph.phase + ": " + fmt(ph.total_ms_per_step, 3) + " ms of " + what + " time per step (wall " +
          fmt(r.wall_ms[p], 3) + " ms), " + fmt(calls, 0) + " " + what + "s, " + std::to_string(ph.ops.size()) +
          " distinct, top " +
          std::to_string(std::min<size_t>(a.top, ph.ops.size())) + "\n\n" + t.render() + "\n";
    if (!ph.attention.empty()) {
      MarkdownTable at({"attention part", "calls/step", "ms/step", "share of " + ph.phase});
      for (const auto& s : ph.attention) {
        at.add_row({s.name, fmt(s.calls_per_step, 1), fmt(s.ms_per_step, 3), fmt(100 * s.share, 1) + "%"});
        Record part = base;
        part.update(Json{{field::phase, ph.phase}, {field::attention_part, s.name},
                         {"calls_per_step", s.calls_per_step}, {"share", s.share}});
        records.push_back(part.metric("attention_part_ms", s.ms_per_step, "ms"));
      }
      md += "Attention broken down (ops inside the `attention/<part>` ranges):\n\n" + at.render() + "\n";
    }
  }
  if (!r.trace_path.empty()) md += "Trace of one full step (open in https://ui.perfetto.dev): `" + r.trace_path + "`\n\n";
  md += "_command: `" + run_info().command + "`, commit " + run_info().commit + ", " + run_info().date + "_\n";
  std::cout << md;
  append_jsonl(a.out + "/profile.jsonl", records);
  std::cout << "wrote " << write_text(a.out + "/profile.md", md) << " and " << a.out << "/profile.jsonl\n";
}

}  // namespace

LMSCALE_SUBCOMMAND("", "profile", "top kernels of forward, backward and optimizer (Kineto), attention split",
                   [](CLI::App& app) {
                     auto a = std::make_shared<ProfileArgs>();
                     app.add_option("--size", a->size, "tiny, small, medium, large, xl, 2.7B")->capture_default_str();
                     app.add_option("--context", a->context, "sequence length T")->capture_default_str();
                     app.add_option("--batch", a->batch, "batch size B")->capture_default_str();
                     app.add_option("--precision", a->precision, "fp32, or bf16/fp16 autocast")->capture_default_str();
                     app.add_option("--attention", a->attention, "naive, sdpa or flash")->capture_default_str();
                     app.add_option("--device", a->device, "auto, cpu, cuda, cuda:N")->capture_default_str();
                     app.add_option("--warmup", a->warmup, "unprofiled steps first")->capture_default_str();
                     app.add_option("--steps", a->steps, "profiled steps (tables are per step)")->capture_default_str();
                     app.add_option("--top", a->top, "rows per phase")->capture_default_str();
                     app.add_option("--trace", a->trace, "save a Chrome/Perfetto trace of one step to this path");
                     app.add_option("--out", a->out, "results folder (profile.jsonl, profile.md)")->capture_default_str();
                     app.callback([a] { run(*a); });
                   });
