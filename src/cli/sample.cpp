// `lmscale sample`: text from a checkpoint of `lmscale train` (train_app/checkpoint.h), greedy or top-p
// (train_app/sampling.h), with the tokenizer its corpus was made with (train_app/sample_tokenizer.h). A smoke
// test of a trained model; options and one call each.
#include <filesystem>
#include <iostream>
#include <limits>

#include "cli/registry.h"
#include "cli/step_args.h"
#include "core/device.h"
#include "core/error.h"
#include "train_app/checkpoint.h"
#include "train_app/safetensors.h"
#include "train_app/sample_tokenizer.h"
#include "train_app/sampling.h"

namespace {

struct SampleArgs {
  std::string checkpoint, prompt, device = "cpu", logits;
  lmscale::SampleOptions options;
};

void run(const SampleArgs& a) {
  using namespace lmscale;
  const c10::Device device = resolve_device(a.device);
  const CheckpointInfo c = [&] {
    try {
      return open_checkpoint(a.checkpoint);
    } catch (const c10::Error& e) {  // a missing or damaged checkpoint is the user's to fix: exit 2
      throw UsageError(e.what_without_backtrace());
    }
  }();
  const CheckpointTokenizer tokenizer(c);
  ModelConfig cfg = checkpoint_model_config(c);
  if (device.is_cpu()) cfg.attention = AttentionBackend::Naive;  // the same attention, without the CPU flash reference's cost
  TransformerLM model(cfg);
  model->to(device);
  model->eval();
  load_checkpoint_weights(c, model);
  const std::vector<int64_t> prompt = tokenizer.encode(a.prompt);
  if (prompt.empty()) throw UsageError("--prompt '" + a.prompt + "' has no tokens: pass some text");
  SampleOptions o = a.options;
  o.window = c.manifest.value("config", Json::object()).value("context", cfg.context_length);
  o.stop_id = tokenizer.end_of_text();
  std::cerr << "checkpoint " << c.path << " (step " << c.step << ", " << cfg.name << ", " << tokenizer.describe()
            << "): " << prompt.size() << " prompt tokens, "
            << (o.temperature == 0 ? std::string("greedy") : "temperature " + std::to_string(o.temperature) +
                                                                 ", top-p " + std::to_string(o.top_p) + ", seed " +
                                                                 std::to_string(o.seed))
            << "\n";
  if (!a.logits.empty()) {  // the prompt's logits, for comparing this forward with another implementation's
    at::NoGradGuard no_grad;
    const at::Tensor ids = at::tensor(prompt, at::kLong).reshape({1, -1});
    write_safetensors(a.logits, {{"ids", ids}, {"logits", model->forward(ids.to(device)).to(at::kFloat)}});
  }
  const std::vector<int64_t> generated = generate(model, prompt, o, device);
  std::cout << a.prompt << tokenizer.decode(generated) << std::endl;
}

}  // namespace

LMSCALE_SUBCOMMAND("", "sample", "generate text from a checkpoint of lmscale train (greedy or top-p)", [](CLI::App& app) {
  using namespace lmscale::cli;
  auto a = std::make_shared<SampleArgs>();
  app.add_option("--checkpoint", a->checkpoint,
                 "a checkpoint folder (<out>/checkpoints/<run>/step-N), or a run's folder of them (its newest whole one)")
      ->required();
  app.add_option("--prompt", a->prompt, "the text to continue")->required();
  app.add_option("--max-new-tokens", a->options.max_new_tokens, "tokens to generate (fewer when the model ends the text)")
      ->check(whole_in(0, 1'000'000))->capture_default_str();
  app.add_option("--temperature", a->options.temperature, "softmax temperature; 0: greedy (the most likely token)")
      ->check(at_least(0))->capture_default_str();
  app.add_option("--top-p", a->options.top_p, "nucleus sampling: draw from the most likely tokens whose probability "
                                              "reaches P (1: all)")
      ->check(CLI::Range(1e-9, 1.0))->capture_default_str();
  app.add_option("--seed", a->options.seed, "seed of the draws (the same seed, the same text)")
      ->check(whole_in(0, std::numeric_limits<int64_t>::max()))->capture_default_str();
  app.add_option("--device", a->device, "cpu, cuda, cuda:N or auto")->capture_default_str();
  app.add_option("--logits", a->logits, "also write the prompt's ids and logits (fp32) to this safetensors file");
  app.footer("The tokenizer is the one the checkpoint's corpus was made with (bytes, or its tokenizer.json). Guide: "
             "docs/training.md (Sampling).\nExamples:\n"
             "  lmscale sample --checkpoint results/checkpoints/lmscale-fp32 --prompt 'def main(' --temperature 0\n"
             "  lmscale sample --checkpoint results/checkpoints/lmscale-bf16/step-00002000 --prompt 'import ' --seed 3");
  app.callback([a] { run(*a); });
});
