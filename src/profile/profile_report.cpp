// The kernel-profile report; see profile_report.h.
#include "profile/profile_report.h"

#include <algorithm>
#include <iostream>

#include "core/device.h"
#include "core/stats.h"
#include "profile/profile_summary.h"
#include "results/table.h"
#include "results/writer.h"

namespace lmscale {

std::string write_profile_report(const ProfileOptions& o, const ProfileReport& r, const ProfileReportOptions& rep) {
  // The labels the tables and records use (as the CLI spelled them).
  const struct {
    std::string size, precision, attention, out;
    int64_t context, batch;
    int warmup, steps, top;
  } a{rep.size.empty() ? o.setup.model.name : rep.size,
      rep.precision.empty() ? dtype_name(o.setup.precision) : rep.precision,
      rep.attention.empty() ? attention_backend_name(o.setup.model.attention) : rep.attention,
      rep.out, o.setup.context, o.setup.batch, o.warmup, o.steps, rep.top};
  const bool gpu = o.setup.device.is_cuda();
  Record base("profile", "lmscale-" + a.attention);
  base.update(Json{{field::size, a.size},           {field::context, a.context},   {field::batch, a.batch},
                   {field::precision, a.precision}, {field::attention, a.attention},
                   {field::device, o.setup.device.str()},                         {field::steps, a.steps},
                   {field::mode, mode_name(o.mode)},
                   {field::time_kind, gpu ? "gpu-kernel" : "cpu-self"}});
  std::vector<Json> records;
  const std::string what = gpu ? "kernel" : "CPU op";
  std::string md = "# Kernel profile: " + a.size + ", context " + std::to_string(a.context) + ", batch " +
                   std::to_string(a.batch) + ", " + a.precision + ", attention " + a.attention + "\n\n" +
                   "Device: " + run_info().gpu + ". Times per step, averaged over " + std::to_string(a.steps) +
                   " profiled steps after " + std::to_string(a.warmup) + " warm-up steps; " +
                   (gpu ? "GPU kernel durations from Kineto/CUPTI." : "CPU op self times (no GPU in this run).") +
                   " Wall time includes a device sync and profiler overhead.\n\n";
  // The noise guard of `lmscale bench` (core/stats.h), on each phase's wall time over the profiled
  // steps: the profiler sums the ops over those steps, so their spread is the phase's.
  std::string noisy;
  for (size_t p = 0; p < r.phases.size() && p < r.wall.size(); ++p)
    if (const std::string why = noise_problem(r.wall[p]); !why.empty())
      noisy += (noisy.empty() ? "" : "; ") + r.phases[p].phase + ": " + why;
  if (!noisy.empty())
    md += "**⚠ Not to be trusted** (" + noisy + "): the tables are per-step means over " + std::to_string(a.steps) +
          " profiled steps. Profile again on an idle machine with at least " + std::to_string(4 * kTrustedSteps) +
          " steps, e.g. the run's command with `--steps " + std::to_string(4 * kTrustedSteps) + "`.\n\n";
  for (size_t p = 0; p < r.phases.size(); ++p) {
    const auto& ph = r.phases[p];
    // Launches per step: what a launch-bound step pays for on the CPU, whatever each kernel takes.
    double calls = 0;
    for (const auto& s : ph.ops) calls += s.calls_per_step;
    Record phase = base;
    phase.update(Json{{field::phase, ph.phase}, {"wall_ms", r.wall_ms[p]}, {"distinct_ops", ph.ops.size()},
                      {"calls_per_step", calls}});
    if (p < r.wall.size())  // the wall time's spread over the profiled steps (what the guard reads)
      phase.update(Json{{"wall_std_ms", r.wall[p].std}, {"wall_min_ms", r.wall[p].min}, {"wall_max_ms", r.wall[p].max}});
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
    const std::string spread = p < r.wall.size() && r.wall[p].n > 1 ? " ± " + fmt(r.wall[p].std, 3) : "";
    md += "## " + ph.phase + ": " + fmt(ph.total_ms_per_step, 3) + " ms of " + what + " time per step (wall " +
          fmt(r.wall_ms[p], 3) + spread + " ms), " + fmt(calls, 0) + " " + what + "s, " + std::to_string(ph.ops.size()) +
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
  return md;
}

}  // namespace lmscale
