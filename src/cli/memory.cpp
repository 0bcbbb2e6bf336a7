// `lmscale memory`: the peak-memory table, memory-viewer snapshots, the largest allocations and the
// timeline plot. Options and one call: the report is profile/memory_report. The step is the default
// one (Note [one default step], step_args.h); the precisions fp32 and bf16 side by side (spec §2.4).
#include "cli/registry.h"
#include "cli/step_args.h"
#include "core/device.h"
#include "profile/memory_report.h"

LMSCALE_SUBCOMMAND("", "memory", "peak-memory table, memory-viewer snapshots, largest allocations, timeline plot",
                   [](CLI::App& app) {
  using namespace lmscale::cli;
  struct Args {
    StepArgs step;
    lmscale::MemoryReportOptions report;
    bool no_table = false, no_snapshot = false, no_plot = false;
  };
  auto a = std::make_shared<Args>();
  a->step.size = {"2.7B"};
  a->step.context = {128, 256, 512};
  a->step.precision = {"fp32", "bf16"};
  a->step.mode = {"forward", "train-step"};
  a->step.warmup = 1;
  a->step.steps = 1;
  add_step_options(app, a->step,
                   {kSize | kContext | kPrecision | kMode | kAttention | kBatch | kDevice | kWarmup | kSteps |
                        kFastPath | kReference,
                    kContext | kPrecision | kMode});
  auto& r = a->report;
  app.add_option("--snapshot-context", r.snapshot_context, "context of the snapshots (default: the first --context)")
      ->check(at_least(0));
  app.add_option("--snapshot-precision", r.snapshot_precision,
                 "precision of the snapshots (default: the first --precision)")
      ->check(one_of("precision", {"fp32", "bf16", "fp16"}));
  app.add_option("--snapshot-steps", r.snapshot_steps, "steps recorded per snapshot")
      ->check(at_least(1))->capture_default_str();
  app.add_option("--stacks", r.stacks, "python (no C++ frames, fast) or all (C++ frames, slow)")
      ->check(one_of("stack mode", {"python", "all"}))->capture_default_str();
  app.add_option("--top", r.top, "rows of largest blocks / origins")->check(at_least(1))->capture_default_str();
  app.add_flag("--no-table", a->no_table, "skip the peak-memory sweep");
  app.add_flag("--no-snapshot", a->no_snapshot, "skip the memory-history snapshots");
  app.add_flag("--no-plot", a->no_plot, "do not plot the timeline");
  app.add_option("--out", r.out, "results folder (memory.jsonl, memory.md, snapshots)")->capture_default_str();
  app.footer(std::string(kDefaultStepHelp) +
             " memory measures fp32 and bf16 side by side unless --precision says otherwise: comparing them is what "
             "docs/spec.md §2.4 asks.\n"
             "Examples:\n  lmscale memory --size 2.7B --context 128,256,512 --precision fp32,bf16 --mode forward,train-step\n"
             "  lmscale memory --reference --no-snapshot");
  app.callback([a] {
    auto& s = a->step;
    apply_default_step(s, lmscale::resolve_device(s.device).is_cuda());
    auto r = a->report;
    r.base = to_setup(s, first_point(s), c10::Device("cpu"));  // model, attention, fast path; device set per run
    r.size = s.size.front();
    r.attention = s.attention.front();
    r.device = s.device;
    r.contexts = s.context;
    r.precisions = s.precision;
    r.modes = s.mode;
    r.batch = s.batch;
    r.warmup = static_cast<int>(s.warmup);
    r.steps = static_cast<int>(s.steps);
    r.table = !a->no_table;
    r.snapshot = !a->no_snapshot;
    r.plot = !a->no_plot;
    lmscale::run_memory_report(r);
  });
});
