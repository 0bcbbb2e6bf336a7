// `lmscale lab accumulation` and `lmscale lab autocast`: the mixed-precision lab of docs/spec.md §2.3.
// Options and one call each: the experiments are profile/lab_precision, the reports profile/lab_report.
#include "cli/registry.h"
#include "cli/step_args.h"
#include "profile/lab_report.h"

LMSCALE_SUBCOMMAND("", "lab", "mixed-precision lab: accumulation error and autocast dtypes", [](CLI::App& app) {
  app.require_subcommand(1);
  app.footer("Examples:\n  lmscale lab accumulation\n  lmscale lab autocast --device cpu");
});

LMSCALE_SUBCOMMAND("lab", "accumulation", "sum 0.01 a thousand times in four precision setups", [](CLI::App& app) {
  auto steps = std::make_shared<int64_t>(1000);
  auto increment = std::make_shared<double>(0.01);
  auto out = std::make_shared<std::string>("results");
  app.add_option("--steps", *steps, "number of additions")->check(lmscale::cli::at_least(1))->capture_default_str();
  app.add_option("--increment", *increment, "value added each step")->capture_default_str();
  app.add_option("--out", *out, "results folder (lab.jsonl, lab_accumulation.md)")->capture_default_str();
  app.footer("Example:\n  lmscale lab accumulation --steps 1000 --increment 0.01");
  app.callback([=] { lmscale::run_accumulation_report(*steps, *increment, *out); });
});

LMSCALE_SUBCOMMAND("lab", "autocast", "dtypes of a toy model's tensors under fp16 and bf16 autocast",
                   [](CLI::App& app) {
  auto device = std::make_shared<std::string>("all");
  auto out = std::make_shared<std::string>("results");
  app.add_option("--device", *device, "all (cpu, plus cuda:0 if visible), cpu, cuda or cuda:N")
      ->capture_default_str();
  app.add_option("--out", *out, "results folder (lab.jsonl, lab_autocast.md)")->capture_default_str();
  app.footer("Example:\n  lmscale lab autocast --device all");
  app.callback([=] { lmscale::run_autocast_report(*device, *out); });
});
