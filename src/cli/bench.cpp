// `lmscale bench`: the end-to-end benchmark (the README's main job). Picks the GPU when there is
// one (default config: small, context 512, bf16, full training step), else a small CPU config.
// Other benchmarks nest under it (`bench attention`, `bench comm`, ...), registered in their files.
#include <iostream>
#include <sstream>

#include "bench/e2e_sweep.h"
#include "cli/registry.h"
#include "core/device.h"

namespace {

struct BenchArgs {
  std::vector<std::string> sizes, precisions, modes, attention, compare;
  std::vector<int64_t> contexts;
  int64_t d_model = 0, d_ff = 0, layers = 0, heads = 0, vocab = 10000, model_context = 0, batch = 4;
  int warmup = 5, steps = 10;
  std::string device = "auto", out = "results", compile_scope = "blocks";
  bool cuda_graph = false, warmup_study = false, all_sizes = false, resume = false;
};

lmscale::ModelConfig custom_or_named(const std::string& size, const BenchArgs& a) {
  if (size != "custom") {
    auto c = lmscale::model_config(size);
    if (a.d_model || a.d_ff || a.layers || a.heads)
      std::cerr << "note: --d-model/--d-ff/--layers/--heads apply to --size custom only; using " << size << "\n";
    return c;
  }
  TORCH_CHECK(a.d_model > 0 && a.d_ff > 0 && a.layers > 0 && a.heads > 0,
              "--size custom needs --d-model, --d-ff, --layers and --heads (all positive)");
  lmscale::ModelConfig c;
  c.name = "custom";
  c.vocab_size = a.vocab;
  c.d_model = a.d_model;
  c.d_ff = a.d_ff;
  c.num_layers = a.layers;
  c.num_heads = a.heads;
  c.validate();
  return c;
}

void run(BenchArgs a) {
  using namespace lmscale;
  const c10::Device device = resolve_device(a.device);
  const bool gpu = device.is_cuda();
  set_run_gpu(device_name(device));
  // Defaults depend on the device: the GPU default is the config docs/spec.md §5 compares against.
  if (a.all_sizes) a.sizes = size_names();
  if (a.sizes.empty()) a.sizes = {gpu ? "small" : "tiny"};
  if (a.contexts.empty()) a.contexts = {gpu ? 512 : 128};
  if (a.precisions.empty()) a.precisions = {gpu ? "bf16" : "fp32"};
  if (a.modes.empty()) a.modes = {"train-step"};
  if (a.attention.empty()) a.attention = {"naive"};
  for (auto t : a.contexts) TORCH_CHECK(t > 0, "--context must be positive, got ", t);

  E2ESweep s;
  for (const auto& n : a.sizes) s.models.push_back(custom_or_named(n, a));
  s.contexts = a.contexts;
  for (const auto& p : a.precisions) s.precisions.push_back(parse_dtype(p));
  for (const auto& m : a.modes) s.modes.push_back(parse_mode(m));
  for (const auto& b : a.attention) s.backends.push_back(parse_attention_backend(b));
  s.baselines = a.compare;  // CLI11 already split the comma lists
  for (const auto& b : s.baselines)
    TORCH_CHECK(b == "torch-eager" || b == "torch-compile", "--compare '", b,
                "' is not a baseline: use torch-eager and/or torch-compile");
  TORCH_CHECK(a.compile_scope == "blocks" || a.compile_scope == "model", "--compile-scope '", a.compile_scope,
              "' is not a scope: use blocks (each block + head/loss) or model (one graph)");
  s.compile_scope = a.compile_scope;
  s.resume = a.resume;
  s.model_context = a.model_context;
  s.base.setup.batch = a.batch;
  s.base.setup.device = device;
  s.base.warmup = a.warmup;
  s.base.steps = a.steps;
  s.base.cuda_graph = a.cuda_graph;
  s.out_dir = a.out;
  TORCH_CHECK(a.warmup >= 0, "--warmup must be >= 0, got ", a.warmup);
  TORCH_CHECK(a.steps >= 1, "--steps must be >= 1, got ", a.steps);
  TORCH_CHECK(a.batch >= 1, "--batch must be >= 1, got ", a.batch);
  TORCH_CHECK(!a.cuda_graph || gpu, "--cuda-graph captures CUDA work and needs a GPU: drop it or use --device cuda");
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
  std::cout << run_e2e_sweep(s);
  std::cout << "\nwrote " << a.out << "/e2e.{jsonl,md}\n";
}

}  // namespace

LMSCALE_SUBCOMMAND("", "bench", "end-to-end training benchmark (and, nested, the other benchmarks)", [](CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  app.add_option("--size", a->sizes, "model size(s): tiny, small, medium, large, xl, 2.7B, custom (comma list)")
      ->delimiter(',');
  app.add_flag("--all-sizes", a->all_sizes, "the five REFERENCE sizes, small … 2.7B");
  app.add_option("--d-model", a->d_model, "custom size: model dim");
  app.add_option("--d-ff", a->d_ff, "custom size: feed-forward dim");
  app.add_option("--layers", a->layers, "custom size: number of blocks");
  app.add_option("--heads", a->heads, "custom size: attention heads");
  app.add_option("--vocab", a->vocab, "custom size: vocabulary (default 10000)");
  app.add_option("--context", a->contexts, "sequence length(s) (comma list; default 512 on GPU, 128 on CPU)")
      ->delimiter(',');
  app.add_option("--model-context", a->model_context, "model's max context (default: longest --context)");
  app.add_option("--batch", a->batch, "batch size (default 4)");
  app.add_option("--warmup", a->warmup, "warm-up steps, not timed (default 5)");
  app.add_option("--steps", a->steps, "timed steps (default 10)");
  app.add_option("--mode", a->modes, "forward | forward-backward | train-step (comma list; default train-step)")
      ->delimiter(',');
  app.add_option("--precision", a->precisions, "fp32 | bf16 | fp16 autocast (comma list; default bf16 GPU, fp32 CPU)")
      ->delimiter(',');
  app.add_option("--attention", a->attention, "naive | sdpa | flash (comma list; default naive)")->delimiter(',');
  app.add_option("--device", a->device, "auto | cpu | cuda | cuda:N (default auto)");
  app.add_flag("--cuda-graph", a->cuda_graph, "capture the whole step as one CUDA graph and replay it");
  app.add_flag("--warmup-study", a->warmup_study, "run the first config with 0, 1, 2, 5 warm-up steps");
  app.add_option("--compare", a->compare, "PyTorch baselines in the same run: torch-eager, torch-compile")
      ->delimiter(',');
  app.add_option("--compile-scope", a->compile_scope,
                 "torch-compile baseline: blocks (each block + head/loss, default) or model (one graph)");
  app.add_option("--out", a->out, "results folder (default results/)");
  app.add_flag("--resume", a->resume,
               "keep results already in <out>/e2e.jsonl for the same configs; measure only the rest");
  app.callback([a, &app] {
    if (!app.get_subcommands().empty()) return;  // a nested benchmark ran instead
    run(*a);
  });
});
