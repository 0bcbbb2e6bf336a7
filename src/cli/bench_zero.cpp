// `lmscale bench zero`: ZeRO-1 memory and time vs unsharded (run under `lmscale launch -n 2 --`).
#include <iostream>

#include "bench/zero_bench.h"
#include "cli/registry.h"

LMSCALE_SUBCOMMAND("bench", "zero", "optimizer-state and gradient sharding (ZeRO-1, ZeRO-2): memory breakdown and step time", [](CLI::App& app) {
  auto o = std::make_shared<lmscale::ZeroBenchOptions>();
  app.add_option("--size", o->size, "model size")->capture_default_str();
  app.add_option("--precision", o->precision, "fp32 or bf16 (autocast)")->capture_default_str();
  app.add_option("--impls", o->impls, "unsharded, zero1-broadcast, zero1-reduce-scatter, zero2")->delimiter(',')
      ->capture_default_str();
  app.add_option("--batch", o->batch, "batch per rank")->capture_default_str();
  app.add_option("--context", o->context, "sequence length")->capture_default_str();
  app.add_option("--warmup", o->warmup, "untimed steps")->capture_default_str();
  app.add_option("--steps", o->steps, "timed steps")->capture_default_str();
  app.add_option("--backend", o->backend, "auto, nccl, gloo")->capture_default_str();
  app.add_option("--out", o->out, "results folder (zero.jsonl, zero.md)")->capture_default_str();
  app.add_option("--bucket-mb", o->bucket_mb, "zero2: gradient bucket cap in MiB")->capture_default_str();
  app.footer("Run under `lmscale launch -n 2 --`. A collective that does not finish within LMSCALE_DIST_TIMEOUT_S "
             "seconds (default 300) stops the run, naming the rank, collective, step and missing ranks.");
  app.callback([o] {
    std::string table = lmscale::run_zero_bench(*o);
    if (!table.empty()) std::cout << table << "\nwrote " << o->out << "/zero.{jsonl,md}\n";
  });
});
