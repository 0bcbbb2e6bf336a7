// `lmscale bench zero`: ZeRO-1 memory and time vs unsharded (run under `lmscale launch -n 2 --`).
#include <iostream>

#include "bench/zero_bench.h"
#include "cli/registry.h"
#include "cli/step_args.h"

LMSCALE_SUBCOMMAND("bench", "zero", "optimizer-state and gradient sharding (ZeRO-1, ZeRO-2): memory breakdown and step time", [](CLI::App& app) {
  using namespace lmscale::cli;
  auto o = std::make_shared<lmscale::ZeroBenchOptions>();
  auto st = std::make_shared<StepArgs>(step_defaults_from(*o));
  add_step_options(app, *st, {kDistributedStepFlags, kImpl,
                              {"unsharded", "zero1", "zero2", "zero1-broadcast", "zero1-reduce-scatter"},
                              "optimizer-state layouts",
                              {"train-step"},
                              "train-step only: the layouts differ in the optimizer step and its communication"});
  app.add_option("--backend", o->backend, "auto (nccl with GPUs, else gloo), nccl, gloo")
      ->check(one_of("backend", {"auto", "nccl", "gloo"}))->capture_default_str();
  app.add_option("--out", o->out, "results folder (zero.jsonl, zero.md)")->capture_default_str();
  app.add_option("--bucket-mb", o->bucket_mb, "unsharded, zero1, zero2: gradient bucket cap in MiB")->check(at_least(0))->capture_default_str();
  app.add_option("--check-consistency", o->check_consistency,
                 "every N steps compare every parameter's checksum across ranks; stop at the first that differs (0: off)")
      ->check(whole_at_least(0))->capture_default_str();
  app.footer(distributed_bench_footer("lmscale launch -n 2 -- bench zero --size small --precision bf16"));
  app.callback([o, st] {
    set_distributed_step(*st, *o);
    std::string table = lmscale::run_zero_bench(*o);
    if (!table.empty()) std::cout << table << "\nwrote " << o->out << "/zero.{jsonl,md}\n";
  });
});
