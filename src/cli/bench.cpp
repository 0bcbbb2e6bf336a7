// `lmscale bench`: the end-to-end benchmark (the README's main job): its options, then one call,
// run_e2e_command (bench/e2e_command.h). On a GPU the default step (Note [one default step],
// step_args.h) at small, context 512; on the CPU tiny, context 128. Other benchmarks nest under it
// (`bench attention`, `bench comm`, ...), registered in their files.
#include <iostream>

#include "bench/e2e_command.h"
#include "cli/config_file.h"
#include "cli/registry.h"
#include "cli/step_args.h"
#include "core/device.h"
#include "results/writer.h"

namespace {

struct BenchArgs {
  lmscale::cli::StepArgs step;
  int64_t model_context = 0;
  std::string out = "results", baseline_scope = "model";
  bool warmup_study = false, all_sizes = false, resume = false, ablate = false;
};

// The parsed flags as the library's grid: lmscale always runs, the other --impl values are baselines.
lmscale::E2ESweep to_sweep(const BenchArgs& a, c10::Device device) {
  using namespace lmscale;
  const auto& st = a.step;
  E2ESweep s;
  s.models = cli::models(st);
  s.contexts = st.context;
  for (const auto& p : st.precision) s.precisions.push_back(parse_dtype(p));
  for (const auto& m : st.mode) s.modes.push_back(parse_mode(m));
  for (const auto& b : st.attention) s.backends.push_back(parse_attention_backend(b));
  for (const auto& i : st.impl)
    if (i != "lmscale") s.baselines.push_back(i);
  s.baseline_scope = a.baseline_scope;
  s.resume = a.resume;
  s.model_context = a.model_context;
  // Batch, device and the fast path from the flags; model, context and precision are set per point
  // (sweep_config).
  s.base.setup = cli::to_setup(st, cli::first_point(st), device);
  s.base.warmup = static_cast<int>(st.warmup);
  s.base.steps = static_cast<int>(st.steps);
  if (st.cuda_graph) s.base.cuda_graph = *st.cuda_graph;
  s.out_dir = a.out;
  return s;
}

}  // namespace

LMSCALE_SUBCOMMAND("", "bench", "end-to-end training benchmark (and, nested, the other benchmarks)", [](CLI::App& app) {
  using namespace lmscale::cli;
  auto a = std::make_shared<BenchArgs>();
  // Empty lists: chosen by device once parsed (GPU: small, 512; CPU: tiny, 128; the step: apply_default_step).
  a->step.size.clear();
  a->step.context.clear();
  a->step.impl = {"lmscale"};
  add_step_options(app, a->step,
                   {kSize | kContext | kPrecision | kMode | kAttention | kImpl | kBatch | kDevice | kWarmup | kSteps |
                        kFastPath | kCudaGraph | kReference,
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
  app.add_option_function<std::string>(
         "--compile-scope",
         [a](const std::string& v) {  // the older spelling: blocks was the naive baseline's compile scope
           a->baseline_scope = v == "blocks" ? "naive" : "model";
           std::cerr << "note: --compile-scope is deprecated; it means --baseline-scope " << a->baseline_scope << "\n";
         },
         "deprecated: blocks = --baseline-scope naive, model = model")
      ->check(one_of("compile scope", {"blocks", "model"}));
  app.add_option("--out", a->out, "results folder (e2e.jsonl, e2e.md)")->capture_default_str();
  app.add_flag("--resume", a->resume,
               "keep results already in <out>/e2e.jsonl for the same configs; measure only the rest");
  add_config_option(app);
  app.footer(std::string(kDefaultStepHelp) +
             " bench replays the step as one CUDA graph on a GPU; its size and context default to small, 512 on a GPU "
             "and tiny, 128 on the CPU.\n"
             "Examples:\n  lmscale bench\n  lmscale bench --size small,medium --context 256,512 --precision bf16\n"
             "  lmscale bench --size custom --d-model 512 --d-ff 2048 --layers 8 --heads 8 --attention flash\n"
             "  lmscale bench --impl lmscale,torch-compile,torch-compile-ro\n  lmscale bench --ablate --size small,xl\n"
             "  lmscale bench --reference --precision fp32,bf16");
  app.callback([a, &app] {
    if (!app.get_subcommands().empty()) return;  // a nested benchmark ran instead
    apply_config_file(app);
    auto& st = a->step;
    const c10::Device device = lmscale::resolve_device(st.device);
    const bool gpu = device.is_cuda();
    if (a->all_sizes) st.size = lmscale::size_names();
    if (!gpu && st.device == "auto")
      std::cout << "lmscale: no GPU found: running on the CPU"
                << (st.size.empty() ? " with the small CPU configuration (tiny, context 128, fp32)" : "")
                << "; on a GPU machine this runs small, context 512, bf16\n";
    apply_default_step(st, gpu);
    lmscale::check_output_folder(a->out);  // config.toml beside the records, before the first measurement
    lmscale::write_text(a->out + "/config.toml",
                        resolved_config(app, {{"size", st.size}, {"context", st.context}, {"precision", st.precision},
                                              {"attention", st.attention}}));
    const auto job = a->warmup_study ? lmscale::E2EJob::WarmupStudy
                     : a->ablate     ? lmscale::E2EJob::Ablation
                                     : lmscale::E2EJob::Sweep;
    lmscale::run_e2e_command(to_sweep(*a, device), job);
  });
});
