// `lmscale bench ddp`: DDP policies vs one device (run under `lmscale launch -n 2 --`).
#include <iostream>

#include "bench/ddp_bench.h"
#include "cli/registry.h"

LMSCALE_SUBCOMMAND("bench", "ddp", "DDP step time: naive, flat, overlap, bucketed vs single device", [](CLI::App& app) {
  auto o = std::make_shared<lmscale::DdpBenchOptions>();
  app.add_option("--size", o->size, "model size (tiny, small, medium, large, xl, 2.7B)")->capture_default_str();
  app.add_option("--precision", o->precisions, "fp32, bf16 (autocast); comma list")->delimiter(',')
      ->capture_default_str();
  app.add_option("--impls", o->impls, "single, naive, flat, overlap, bucketed; comma list")->delimiter(',')
      ->capture_default_str();
  app.add_option("--bucket-mb", o->bucket_mb, "bucket caps for 'bucketed' (MiB, comma list)")->delimiter(',')
      ->capture_default_str();
  app.add_option("--batch", o->batch, "batch per rank")->capture_default_str();
  app.add_option("--context", o->context, "sequence length")->capture_default_str();
  app.add_option("--warmup", o->warmup, "untimed steps per config")->capture_default_str();
  app.add_option("--steps", o->steps, "timed steps per config")->capture_default_str();
  app.add_option("--backend", o->backend, "auto, nccl, gloo")->capture_default_str();
  app.add_option("--trace-dir", o->trace_dir, "write Chrome/Perfetto traces of one step (rank 0) here");
  app.add_option("--trace-impls", o->trace_impls, "which impls to trace (comma list)")->delimiter(',')
      ->capture_default_str();
  app.add_option("--out", o->out, "results folder (ddp.jsonl, ddp.md)")->capture_default_str();
  app.callback([o] {
    std::string table = lmscale::run_ddp_bench(*o);
    if (!table.empty()) std::cout << table << "\nwrote " << o->out << "/ddp.{jsonl,md}\n";
  });
});
