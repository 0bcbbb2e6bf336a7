// `lmscale train`: trains the model on a token file and records the training and validation loss
// (train_app/train_run.h); `lmscale train corpus` makes the token files from text (train_app/corpus.h).
// Options and one call each; the loop, records and comparison belong to the library.
#include <filesystem>
#include <limits>
#include <iostream>

#include "cli/config_file.h"
#include "cli/registry.h"
#include "cli/step_args.h"
#include "core/device.h"
#include "core/error.h"
#include "results/writer.h"
#include "train_app/corpus.h"
#include "train_app/packing.h"
#include "train_app/train_reference.h"
#include "train_app/train_run.h"

namespace {

// The largest --steps (and --eval-every, --lr-warmup): far beyond any run this tool is for, and small
// enough that the per-step tables (the evaluation steps, the reference's batches) stay in memory.
constexpr int64_t kMaxSteps = 10'000'000;
constexpr int64_t kMaxEvalBatches = 100'000;

struct TrainArgs {
  lmscale::cli::StepArgs step;
  std::string corpus, train_file, val_file, out = "results";
  int64_t steps = 1000, eval_every = 100, eval_batches = 8, lr_warmup = -1;
  double lr = 1e-3, lr_min = -1, clip = 1.0;
  uint64_t seed = 0;
  bool resume = false, pack = false;
  int64_t save_every = 0, stop_at = 0, keep_checkpoints = 2;
};

void run(TrainArgs a, const CLI::App& app) {
  using namespace lmscale;
  auto& st = a.step;
  if (!a.corpus.empty()) {
    if (a.train_file.empty()) a.train_file = (std::filesystem::path(a.corpus) / "train.bin").string();
    if (a.val_file.empty()) a.val_file = (std::filesystem::path(a.corpus) / "val.bin").string();
  }
  if (a.train_file.empty() || a.val_file.empty())
    throw CLI::ValidationError("--corpus", "no token files: pass --corpus DIR (made by `lmscale train corpus --out DIR`) "
                                           "or both --train-file and --val-file");
  if (a.lr_warmup > a.steps)
    throw CLI::ValidationError("--lr-warmup", std::to_string(a.lr_warmup) + " is more than --steps " +
                                                  std::to_string(a.steps));
  if (a.lr_min > a.lr)
    throw CLI::ValidationError("--lr-min", "must not exceed --lr");
  if (a.stop_at > a.steps)
    throw CLI::ValidationError("--stop-at", std::to_string(a.stop_at) + " is past the last step, --steps " +
                                                std::to_string(a.steps));
  const c10::Device device = resolve_device(st.device);
  const bool gpu = device.is_cuda();
  set_run_gpu(device_name(device));
  // The default step with its by-device size and context, as in `lmscale bench` (Note [one default step]).
  cli::apply_default_step(st, gpu);

  TrainOptions o;
  o.base.train_path = a.train_file;
  o.base.val_path = a.val_file;
  o.base.steps = a.steps;
  o.base.eval_every = a.eval_every;
  o.base.eval_batches = a.eval_batches;
  o.base.lr.peak = a.lr;
  o.base.lr.floor = a.lr_min >= 0 ? a.lr_min : a.lr / 10;
  o.base.lr.warmup = a.lr_warmup >= 0 ? a.lr_warmup : a.steps / 20;
  o.base.lr.total = a.steps;
  o.base.clip = a.clip;
  o.base.data_seed = a.seed;
  o.base.pack = a.pack;
  if (a.pack) check_as_usage([&] { o.base.end_of_file_id = pack_end_of_file_id(a.train_file); });
  o.precisions = st.precision;
  o.impls = st.impl;
  o.out = a.out;
  o.resume = a.resume;
  o.save_every = a.save_every;
  o.stop_at = a.stop_at;
  o.keep_checkpoints = static_cast<int>(a.keep_checkpoints);
  const cli::StepPoint first = cli::first_point(st);
  o.setup_for = [st, first, device, seed = a.seed](const std::string& precision) {
    cli::StepPoint p = first;
    p.precision = precision;
    StepSetup s = cli::to_setup(st, p, device);
    s.seed = seed;
    return s;
  };
  // Every input checked before anything is written (usage errors, exit 2): each run's setup and the
  // token files against its vocabulary, then the results folder (made by the check).
  for (const auto& p : o.precisions) {
    TrainRun r = o.base;
    r.setup = o.setup_for(p);
    r.precision = p;
    check_as_usage([&] {
      validate(r);
      set_corpus_identity(r);
    });
  }
  check_output_folder(a.out);
  // What ran, beside its records: the device's defaults and the derived learning-rate flags as chosen.
  write_text((std::filesystem::path(a.out) / "config.toml").string(),
             cli::resolved_config(app, {{"size", st.size}, {"context", st.context}, {"precision", st.precision},
                                        {"attention", st.attention}, {"lr-min", o.base.lr.floor},
                                        {"lr-warmup", o.base.lr.warmup}}));
  const TrainOutcome done = run_training(o);
  if (!done.comparison.empty()) std::cout << "\n" << done.comparison;
  std::cout << "\nwrote " << a.out << "/train.jsonl" << (done.comparison.empty() ? "" : " and train_compare.md")
            << " (" << done.runs << " runs" << (done.skipped ? ", " + std::to_string(done.skipped) + " complete already" : "")
            << (done.stopped ? ", " + std::to_string(done.stopped) + " stopped at --stop-at" : "")
            << "); checkpoints in " << a.out << "/checkpoints; tables and plots with: lmscale report --in " << a.out << " --out " << a.out << "\n";
  TORCH_CHECK(done.failures == 0, done.failures, " of ", done.runs, " training runs failed",
              done.diverged ? " (" + std::to_string(done.diverged) + " diverged: see the message above)" : std::string(),
              ": their reasons are in ", a.out, "/train.jsonl");
}

}  // namespace

LMSCALE_SUBCOMMAND("", "train", "train the model on a token file; record training and validation loss", [](CLI::App& app) {
  using namespace lmscale::cli;
  auto a = std::make_shared<TrainArgs>();
  a->step.size.clear();       // chosen by device in run(), as in bench
  a->step.context.clear();
  a->step.precision.clear();
  a->step.attention.clear();
  a->step.impl = {"lmscale"};
  add_step_options(app, a->step,
                   {kSize | kContext | kPrecision | kAttention | kImpl | kBatch | kDevice | kFastPath,
                    kPrecision | kImpl,
                    {"lmscale", "torch-eager"},
                    "lmscale and/or the PyTorch reference (torch-eager: the spec's model in PyTorch, trained on the "
                    "same batches with the same learning rates)"});
  app.add_option("--corpus", a->corpus, "folder holding train.bin and val.bin (from `lmscale train corpus`)");
  app.add_option("--train-file", a->train_file, "training token file (uint16 ids; overrides --corpus)");
  app.add_option("--val-file", a->val_file, "validation token file (uint16 ids; overrides --corpus)");
  app.add_flag("--pack", a->pack,
               "cut every context at the corpus's end-of-file ids (corpus.json) and keep attention within each "
               "document; the loss stays on every token (docs/training.md, Packing documents)");
  app.add_option("--steps", a->steps, "optimizer updates")->check(whole_in(1, kMaxSteps))->capture_default_str();
  app.add_option("--eval-every", a->eval_every, "validation loss every K steps (and at 0 and the end)")
      ->check(whole_in(1, kMaxSteps))->capture_default_str();
  app.add_option("--eval-batches", a->eval_batches, "validation batches of --batch windows each, the same every time")
      ->check(whole_in(1, kMaxEvalBatches))->capture_default_str();
  app.add_option("--lr", a->lr, "peak learning rate (AdamW)")->check(at_least(0))->capture_default_str();
  app.add_option("--lr-min", a->lr_min, "learning rate at the last step (default: --lr / 10)")->check(at_least(0));
  app.add_option("--lr-warmup", a->lr_warmup, "steps of linear warm-up before the cosine (default: --steps / 20)")
      ->check(whole_in(0, kMaxSteps));
  app.add_option("--clip", a->clip, "clip gradients to this global L2 norm (0: off)")->check(at_least(0))
      ->capture_default_str();
  app.add_option("--seed", a->seed, "seed of the initial weights and of the data order")
      ->check(whole_in(0, std::numeric_limits<int64_t>::max()))->capture_default_str();
  app.add_option("--out", a->out, "results folder (train.jsonl, train_compare.md)")->capture_default_str();
  app.add_flag("--resume", a->resume,
               "keep the evaluations already in <out>/train.jsonl for the same runs; complete runs are not run "
               "again; a run cut short continues from its newest whole checkpoint in <out>/checkpoints (the same "
               "losses as an uninterrupted run), or without one is replayed from step 0 (same seed, same batches)");
  app.add_option("--save-every", a->save_every,
                 "also write a checkpoint every K steps (one is always written at the last step; 0: only there)")
      ->check(whole_in(0, kMaxSteps))->capture_default_str();
  app.add_option("--stop-at", a->stop_at,
                 "stop lmscale's runs after this step, with a checkpoint there; --resume continues them (0: no stop)")
      ->check(whole_in(0, kMaxSteps))->capture_default_str();
  app.add_option("--keep-checkpoints", a->keep_checkpoints, "the newest checkpoints kept per run (older ones are removed)")
      ->check(whole_in(1, 1000))->capture_default_str();
  add_config_option(app);
  app.footer("Defaults: small, context 512, bf16, flash attention on a GPU; tiny, context 128, fp32, naive attention on "
             "the CPU. Records: docs/results/SCHEMA.md (bench train); guide: docs/training.md.\n"
             "Examples:\n  lmscale train corpus --out data/pystdlib\n"
             "  lmscale train corpus --tokenizer bpe --vocab 10000 --out data/pystdlib-bpe\n"
             "  lmscale train --corpus data/pystdlib --steps 2000 --eval-every 100 --impl lmscale,torch-eager\n"
             "  lmscale train --corpus data/pystdlib --device cpu --size tiny --context 64 --steps 200\n"
             "  lmscale train --corpus data/pystdlib --pack --steps 2000   # attention within each file\n"
             "  lmscale train --config run.toml --steps 4000   # the file's options, --steps from the command line\n"
             "  lmscale sample --checkpoint results/checkpoints/lmscale-fp32 --prompt 'def main('");

  // `lmscale train corpus`: the token files.
  auto c = std::make_shared<lmscale::CorpusOptions>();
  CLI::App* corpus = app.add_subcommand("corpus", "make train.bin / val.bin from text, bytes or BPE ids as tokens "
                                                  "(default: the Python standard library's sources, split by file)");
  corpus->add_option("--from", c->sources, "files and folders of text (default: the standard library of "
                                           "$LMSCALE_PYTHON or python3)");
  corpus->add_option("--ext", c->extension, "take files with this extension from folders")->capture_default_str();
  corpus->add_option("--val-percent", c->val_percent, "share of files held out for validation")
      ->check(CLI::Range(1, 99))->capture_default_str();
  corpus->add_option("--out", c->out, "folder for train.bin, val.bin, corpus.json")->required();
  corpus->add_option("--tokenizer", c->tokenizer,
                     "bytes (ids 0-255), bpe (a byte-level BPE trained on the training files with Hugging Face "
                     "tokenizers), or the path of a tokenizer.json; the BPE kinds keep tokenizer.json in --out")
      ->capture_default_str();
  corpus->add_option("--vocab", c->vocab, "ids of the BPE that --tokenizer bpe trains (at most the model's "
                                          "vocabulary, 10000)")->capture_default_str();
  corpus->callback([c] {
    const lmscale::CorpusSummary s = lmscale::make_corpus(*c);
    std::cout << s.name << ": " << s.train_files << " files, " << s.train_tokens << " tokens → " << s.train_path << "\n"
              << "  validation: " << s.val_files << " files, " << s.val_tokens << " tokens → " << s.val_path << "\n"
              << "  manifest: " << s.manifest_path << " (" << s.tokenizer << ", vocabulary of at least "
              << s.vocab_needed << ")\n";
  });
  app.callback([a, &app] {
    if (!app.get_subcommands().empty()) return;  // `train corpus` ran instead
    apply_config_file(app);
    run(*a, app);
  });
});
