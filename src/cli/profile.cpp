// `lmscale profile`: where the time of one training step goes, kernel by kernel, for forward,
// backward and optimizer separately, with the attention sub-parts. Options and one call: measuring
// is profile/profile_run, the tables and files profile/profile_report.
#include <iostream>

#include "cli/registry.h"
#include "cli/step_args.h"
#include "core/device.h"
#include "profile/profile_report.h"
#include "profile/profile_run.h"
#include "results/record.h"
#include "results/writer.h"

namespace {

using namespace lmscale;

struct ProfileArgs {
  cli::StepArgs step;
  std::string trace, out = "results";
  int64_t top = 10;
};

void run(ProfileArgs& a) {
  check_output_folder(a.out);  // before the first measurement, not after it
  const c10::Device device = resolve_device(a.step.device);
  cli::apply_default_step(a.step, device.is_cuda());
  const cli::StepPoint p = cli::first_point(a.step);
  ProfileOptions o;
  o.setup = cli::to_setup(a.step, p, device);
  o.mode = parse_mode(a.step.mode.front());
  o.warmup = static_cast<int>(a.step.warmup);
  o.steps = static_cast<int>(a.step.steps);
  o.trace_path = a.trace;
  set_run_gpu(device_name(o.setup.device));
  std::cout << "profiling " << p.size << " context " << p.context << " batch " << a.step.batch << " " << p.precision
            << " attention " << p.attention << " " << a.step.mode.front() << " on " << device_name(o.setup.device) << ": " << o.warmup
            << " warm-up + " << o.steps << " profiled steps\n";
  write_profile_report(o, run_profile(o), {p.size, p.precision, p.attention, static_cast<int>(a.top), a.out});
}

}  // namespace

LMSCALE_SUBCOMMAND("", "profile", "top kernels of forward, backward and optimizer (Kineto), attention split",
                   [](CLI::App& app) {
  using namespace lmscale::cli;
  auto a = std::make_shared<ProfileArgs>();
  a->step.warmup = 2;
  a->step.steps = 3;
  add_step_options(app, a->step,
                   {kSize | kContext | kPrecision | kMode | kAttention | kBatch | kDevice | kWarmup | kSteps | kFastPath |
                        kReference,
                    0, {}, "", {}, "phases profiled: forward; forward-backward; train-step adds the optimizer"});
  app.add_option("--top", a->top, "rows per phase")->check(at_least(1))->capture_default_str();
  app.add_option("--trace", a->trace, "save a Chrome/Perfetto trace of one step to this path");
  app.add_option("--out", a->out, "results folder (profile.jsonl, profile.md)")->capture_default_str();
  app.footer(std::string(kDefaultStepHelp) +
             "\nExamples:\n  lmscale profile --size small --context 512 --trace results/step.json\n"
             "  lmscale profile --reference --mode forward-backward");
  app.callback([a] { run(*a); });
});
