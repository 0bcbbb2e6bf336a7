// `lmscale bench attention`: options of the attention benchmarks (bench/attention_bench.h).
#include "bench/attention_bench.h"
#include "cli/registry.h"
#include "cli/step_args.h"

LMSCALE_SUBCOMMAND("bench", "attention", "attention sweep, FlashAttention benchmark, leaderboard config",
                   [](CLI::App& app) {
  auto opts = std::make_shared<lmscale::AttentionBenchOptions>();
  auto sweep = std::make_shared<bool>(false), leaderboard = std::make_shared<bool>(false);
  auto no_causal = std::make_shared<bool>(false);
  app.add_flag("--sweep", *sweep, "plain-attention sweep: batch 8, no head dim, 100 fwd + 100 bwd, memory, OOM");
  app.add_flag("--leaderboard", *leaderboard, "16 heads x 16384 x 64, causal, bf16, forward + o.sum() + backward");
  // Same names and comma lists as the model benchmarks (`--context`, `--precision`, `--impl`).
  app.add_option("--context", opts->seqs, "sequence lengths, comma list (default: the mode's grid)")
      ->delimiter(',')->check(lmscale::cli::at_least(1));
  app.add_option("--head-dim", opts->head_dims, "head dims, comma list (default 16,32,64,128)")->delimiter(',')
      ->check(lmscale::cli::at_least(1));
  app.add_option("--precision", opts->dtypes, "bf16, fp16, fp32; comma list (default: sweep fp32, flash bf16,fp32)")
      ->delimiter(',')->check(lmscale::cli::one_of("precision", {"bf16", "fp16", "fp32"}));
  app.add_option("--impl", opts->impls,
                 "lmscale-flash, lmscale-hopper, lmscale-fa2, sdpa-flash, sdpa-cudnn, sdpa-mem-efficient, torch-naive; comma "
                 "list (default: all but lmscale-hopper / lmscale-fa2, which force the kernel path)")
      ->delimiter(',')->check(lmscale::cli::one_of("implementation", lmscale::attention_impls()));
  app.add_option("--batch", opts->batch, "batch size (default: sweep 8, others 1)")->check(lmscale::cli::at_least(1));
  app.add_option("--heads", opts->heads, "heads (default: sweep none, flash 1, leaderboard 16)")
      ->check(lmscale::cli::at_least(1));
  app.add_flag("--no-causal", *no_causal, "no causal mask (the sweep is always non-causal)");
  app.add_option("--warmup", opts->warmup, "warm-up iterations per phase")->capture_default_str();
  app.add_option("--iters", opts->iters, "timed iterations per phase (default: sweep 100, flash 20, leaderboard 50)");
  app.add_option("--device", opts->device, "auto | cpu | cuda:N")->capture_default_str();
  app.add_option("--out", opts->out, "results folder (attention.jsonl, attention.md)")->capture_default_str();
  app.footer("Examples:\n  lmscale bench attention --context 1024,4096 --head-dim 64 --precision bf16\n"
             "  lmscale bench attention --sweep\n  lmscale bench attention --leaderboard");
  app.callback([opts, sweep, leaderboard, no_causal] {
    auto o = *opts;
    o.mode = *sweep ? "sweep" : (*leaderboard ? "leaderboard" : "flash");
    o.causal = !*no_causal && !*sweep;
    lmscale::run_attention_bench(o);
  });
});
