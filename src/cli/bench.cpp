// `lmscale bench`: the end-to-end benchmark (the README's main job). Picks the GPU when there is
// one (default config: small, context 512, bf16, full training step), else a small CPU config.
// Other benchmarks nest under it (`bench attention`, `bench comm`, ...), registered in their files.
#include <iostream>
#include <sstream>

#include "bench/e2e_ablate.h"
#include "bench/e2e_sweep.h"
#include "bench/e2e_torch_baseline.h"
#include "cli/registry.h"
#include "cli/step_args.h"
#include "core/device.h"

namespace {

struct BenchArgs {
  lmscale::cli::StepArgs step;
  int64_t model_context = 0;
  std::string out = "results", compile_scope, baseline_scope = "model";
  bool warmup_study = false, all_sizes = false, resume = false, ablate = false;
};

void run(BenchArgs a) {
  using namespace lmscale;
  auto& st = a.step;
  const c10::Device device = resolve_device(st.device);
  const bool gpu = device.is_cuda();
  set_run_gpu(device_name(device));
  // Defaults depend on the device: the GPU default is the config docs/spec.md §5 compares against.
  if (a.all_sizes) st.size = size_names();
  if (!gpu && st.device == "auto")
    std::cout << "lmscale: no GPU found: running on the CPU" << (st.size.empty() ? " with the small CPU "
                                                                  "configuration (tiny, context 128, fp32)" : "")
              << "; on a GPU machine this runs small, context 512, bf16\n";
  if (st.size.empty()) st.size = {gpu ? "small" : "tiny"};
  if (st.context.empty()) st.context = {gpu ? 512 : 128};
  if (st.precision.empty()) st.precision = {gpu ? "bf16" : "fp32"};
  if (st.attention.empty()) st.attention = {gpu ? "flash" : "naive"};
  if (st.cuda_graph.value_or(false) && !gpu)
    throw CLI::ValidationError("--cuda-graph", "captures CUDA work and needs a GPU: drop it or use --device cuda");

  E2ESweep s;
  s.models = cli::models(st);
  s.contexts = st.context;
  for (const auto& p : st.precision) s.precisions.push_back(parse_dtype(p));
  for (const auto& m : st.mode) s.modes.push_back(parse_mode(m));
  for (const auto& b : st.attention) s.backends.push_back(parse_attention_backend(b));
  for (const auto& i : st.impl)
    if (i != "lmscale") s.baselines.push_back(i);  // lmscale always runs; the rest are baselines
  for (const auto& b : s.baselines) check_torch_baseline(b);
  if (!a.compile_scope.empty()) {  // the older spelling: blocks was the naive baseline's compile scope
    a.baseline_scope = a.compile_scope == "blocks" ? "naive" : "model";
    std::cerr << "note: --compile-scope is deprecated; it means --baseline-scope " << a.baseline_scope << "\n";
  }
  check_baseline_scope(a.baseline_scope);
  s.baseline_scope = a.baseline_scope;
  s.resume = a.resume;
  s.model_context = a.model_context;
  s.base.setup.batch = st.batch;
  s.base.setup.device = device;
  s.base.setup.fused = st.fused;
  s.base.setup.optimizer_in_backward = st.optimizer_in_backward;
  if (st.optimizer_overlap) s.base.setup.optimizer_overlap = *st.optimizer_overlap;
  s.base.warmup = static_cast<int>(st.warmup);
  s.base.steps = static_cast<int>(st.steps);
  if (st.cuda_graph) s.base.cuda_graph = *st.cuda_graph;
  s.out_dir = a.out;
  // Validate every config before the first one runs, so a typo fails in a second, not an hour in.
  for (const auto& m : s.models)
    for (auto t : s.contexts)
      for (auto p : s.precisions)
        for (auto b : s.backends) validate(sweep_config(s, m, t, p, s.modes.front(), b).setup);
  if (a.warmup_study) {
    const E2EConfig c = sweep_config(s, s.models.front(), s.contexts.front(), s.precisions.front(), s.modes.front(),
                                      s.backends.front());
    std::cout << run_warmup_study(c, a.out);
    std::cout << "\nwrote " << a.out << "/e2e_warmup.{jsonl,md}\n";
    return;
  }
  if (a.ablate) {  // one table per run: each fast-path piece added in turn (bench/e2e_ablate.h)
    std::vector<E2EConfig> bases;
    for (const auto& m : s.models)
      for (auto t : s.contexts)
        for (auto p : s.precisions) bases.push_back(sweep_config(s, m, t, p, s.modes.front(), s.backends.front()));
    std::cout << run_ablation(bases, a.out) << "\nwrote " << a.out << "/e2e_ablate.{jsonl,md}\n";
    return;
  }
  const SweepOutcome done = run_e2e_sweep(s);
  std::cout << done.table << "\nwrote " << a.out << "/e2e.{jsonl,md}\n";
  TORCH_CHECK(done.failures == 0, done.failures, " of ", done.cells,
              " cells failed (out of memory does not count): their reasons are in ", a.out, "/e2e.md");
}

}  // namespace

LMSCALE_SUBCOMMAND("", "bench", "end-to-end training benchmark (and, nested, the other benchmarks)", [](CLI::App& app) {
  using namespace lmscale::cli;
  auto a = std::make_shared<BenchArgs>();
  // Empty lists: chosen by device in run() (GPU: small, 512, bf16; CPU: tiny, 128, fp32).
  a->step.size.clear();
  a->step.context.clear();
  a->step.precision.clear();
  a->step.attention.clear();  // flash on a GPU (the fast path), naive on the CPU
  a->step.impl = {"lmscale"};
  add_step_options(app, a->step,
                   {kSize | kContext | kPrecision | kMode | kAttention | kImpl | kBatch | kDevice | kWarmup | kSteps |
                        kFastPath | kCudaGraph,
                    kSize | kContext | kPrecision | kMode | kAttention | kImpl,
                    {"lmscale", "torch-eager", "torch-compile", "torch-compile-ro", "torch-float8", "torch-float8-ro"},
                    "lmscale (always runs) and PyTorch baselines in the same run: torch-eager, torch-compile, "
                    "torch-compile-ro (reduce-overhead); with --precision fp8: torch-float8, torch-float8-ro "
                    "(torchao float8 training + torch.compile)"});
  app.add_flag("--all-sizes", a->all_sizes, "the five sizes of docs/spec.md §1, small … 2.7B");
  app.add_option("--model-context", a->model_context, "model's max context (default: longest --context)")
      ->check(at_least(0));
  app.add_flag("--warmup-study", a->warmup_study, "run the first config with 0, 1, 2, 5 warm-up steps");
  app.add_flag("--ablate", a->ablate,
               "one row per fast-path piece (eager unfused, + CUDA graph, + each fusion) for each config");
  app.add_option("--baseline-scope", a->baseline_scope,
                 "what the baselines measure: model (SDPA, whole model compiled; default) or naive (attention "
                 "written out, each block compiled)")
      ->check(one_of("baseline scope", {"model", "naive"}))->capture_default_str();
  app.add_option("--compile-scope", a->compile_scope, "deprecated: blocks = --baseline-scope naive, model = model")
      ->check(one_of("compile scope", {"blocks", "model"}));
  app.add_option("--out", a->out, "results folder (e2e.jsonl, e2e.md)")->capture_default_str();
  app.add_flag("--resume", a->resume,
               "keep results already in <out>/e2e.jsonl for the same configs; measure only the rest");
  app.footer("Defaults: small, context 512, bf16, flash attention, CUDA graph on a GPU; tiny, context 128, fp32, naive "
             "attention on the CPU.\n"
             "Examples:\n  lmscale bench\n  lmscale bench --size small,medium --context 256,512 --precision bf16\n"
             "  lmscale bench --size custom --d-model 512 --d-ff 2048 --layers 8 --heads 8 --attention flash\n"
             "  lmscale bench --impl lmscale,torch-compile,torch-compile-ro\n  lmscale bench --ablate --size small,xl");
  app.callback([a, &app] {
    if (!app.get_subcommands().empty()) return;  // a nested benchmark ran instead
    run(*a);
  });
});
