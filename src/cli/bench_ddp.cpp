// `lmscale bench ddp`: the data-parallel designs vs one device (run under `lmscale launch -n 2 --`).
#include <iostream>

#include "bench/ddp_bench.h"
#include "cli/registry.h"
#include "cli/step_args.h"
#include "distributed/data_parallel.h"

LMSCALE_SUBCOMMAND("bench", "ddp", "data-parallel step time: DDP policies and the distributed optimizer (zero1, zero2) vs one device", [](CLI::App& app) {
  using namespace lmscale::cli;
  auto o = std::make_shared<lmscale::DdpBenchOptions>();
  auto st = std::make_shared<StepArgs>(step_defaults_from(*o));
  add_step_options(app, *st, {kDistributedStepFlags, kPrecision | kImpl,
                              lmscale::distributed::data_parallel_designs(),
                              "data-parallel designs (single = one device, the baseline; zero1/zero2 = the distributed optimizer)",
                              {"train-step"},
                              "train-step only: the designs differ in backward's communication and the step after it"});
  app.add_option("--bucket-mb", o->bucket_mb, "bucket caps for bucketed, zero1 and zero2 (MiB, comma list)")->delimiter(',')
      ->check(at_least(1))->capture_default_str();
  app.add_option("--backend", o->backend, "auto (nccl with GPUs, else gloo), nccl, gloo")
      ->check(one_of("backend", {"auto", "nccl", "gloo"}))->capture_default_str();
  app.add_option("--trace-dir", o->trace_dir, "write Chrome/Perfetto traces of one step (rank 0) here");
  app.add_flag("--trace-gpu-only", o->trace_gpu_only,
               "traces record GPU kernels only: little host-side profiler cost, so the traced step's GPU timeline "
               "is the unprofiled one's");
  app.add_option("--trace-impls", o->trace_impls, "which impls to trace (comma list)")->delimiter(',')
      ->capture_default_str();
  app.add_option("--out", o->out, "results folder (ddp.jsonl, ddp.md)")->capture_default_str();
  app.add_option("--comm-dtype", o->comm_dtypes, "gradient communication: fp32, bf16 (comma list: each DDP design with each)")
      ->delimiter(',')->capture_default_str();
  app.add_option("--first-bucket-mb", o->first_bucket_mb, "cap of the first bucket in MiB (negative: same as the others)")
      ->capture_default_str();
  app.add_option("--check-consistency", o->check_consistency,
                 "every N steps compare every parameter's checksum across ranks; stop at the first that differs (0: off)")
      ->check(whole_at_least(0))->capture_default_str();
  app.add_option("--loss-every", o->loss_every,
                 "training-curve run: record the mean loss every N steps per design (ddp_loss.md); 0: timing run")
      ->capture_default_str();
  app.add_option("--nccl-max-ctas", o->nccl_max_ctas, "NCCL: at most this many CTAs per collective (0: NCCL's choice)");
  app.add_option("--nccl-min-ctas", o->nccl_min_ctas, "NCCL: at least this many CTAs per collective (0: NCCL's choice)");
  app.add_flag("--nccl-high-priority", o->nccl_high_priority, "NCCL: run collectives on a high-priority stream");
  app.footer(distributed_bench_footer("lmscale launch -n 2 -- bench ddp --size small --precision fp32,bf16"));
  app.callback([o, st] {
    set_distributed_step(*st, *o);
    o->precisions = st->precision;  // one setup per value of the list
    std::string table = lmscale::run_ddp_bench(*o);
    if (!table.empty()) std::cout << table << "\nwrote " << o->out << "/ddp.{jsonl,md}\n";
  });
});
