// `lmscale bench comm`: collective bandwidth benchmark (run it under `lmscale launch -n N --`).
#include <iostream>

#include "bench/comm_bench.h"
#include "cli/registry.h"

LMSCALE_SUBCOMMAND("bench", "comm", "all-reduce / reduce-scatter / all-gather bandwidth, Gloo and NCCL", [](CLI::App& app) {
  auto o = std::make_shared<lmscale::CommBenchOptions>();
  app.add_option("--backend", o->backends, "gloo (CPU tensors), nccl (GPU tensors); comma list")
      ->delimiter(',')->capture_default_str();
  app.add_option("--ops", o->ops, "all_reduce, reduce_scatter, all_gather; comma list")->delimiter(',')
      ->capture_default_str();
  app.add_option("--sizes-mb", o->sizes_mb, "payload sizes in MiB of fp32 (comma list)")->delimiter(',')
      ->capture_default_str();
  app.add_option("--warmup", o->warmup, "untimed collectives per cell")->capture_default_str();
  app.add_option("--iters", o->iters, "timed collectives per cell (at most)")->capture_default_str();
  app.add_option("--seconds-per-cell", o->seconds_per_cell, "time budget that caps --iters for slow cells")
      ->capture_default_str();
  app.add_option("--out", o->out, "results folder (comm.jsonl, comm.md)")->capture_default_str();
  app.footer("Example (two ranks on this machine):\n  lmscale launch -n 2 -- bench comm --backend gloo --sizes-mb 1,10");
  app.callback([o] {
    std::string table = lmscale::run_comm_bench(*o);
    if (!table.empty()) std::cout << table << "\nwrote " << o->out << "/comm.{jsonl,md}\n";
  });
});
