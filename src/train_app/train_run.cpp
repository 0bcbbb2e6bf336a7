// The run loop of `lmscale train`; see train_run.h.
#include "train_app/train_run.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "model/config_fields.h"
#include "results/reader.h"
#include "results/record.h"
#include "results/writer.h"
#include "core/sweep_progress.h"
#include "train_app/train_compare.h"
#include "train_app/train_progress.h"
#include "train_app/train_reference.h"

namespace lmscale {

namespace fs = std::filesystem;

namespace {

// The corpus's name from the corpus.json beside the training file (`lmscale train corpus`), else the
// file's name: records say what was trained on without a local path.
std::string corpus_name(const std::string& train_path) {
  const fs::path manifest = fs::path(train_path).parent_path() / "corpus.json";
  if (fs::is_regular_file(manifest)) {
    std::ifstream f(manifest);
    const Json j = Json::parse(f, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("name") && j["name"].is_string()) return j["name"].get<std::string>();
  }
  return fs::path(train_path).filename().string();
}

// What a checkpoint records of the corpus: its name and identity (hash, token counts) and the
// tokenizer entry of its corpus.json; `tokenizer_path` gets the tokenizer.json to copy (or "").
Json corpus_identity(const TrainRun& run, std::string* tokenizer_path) {
  Json id = {{"name", corpus_name(run.train_path)}, {"corpus_hash", run.corpus_hash},
             {"train_tokens", run.train_tokens}, {"val_tokens", run.val_tokens}};
  tokenizer_path->clear();
  const fs::path dir = fs::path(run.train_path).parent_path();
  std::ifstream f(dir / "corpus.json");
  const Json j = f ? Json::parse(f, nullptr, /*allow_exceptions=*/false) : Json();
  if (j.is_object() && j.contains("tokenizer") && j["tokenizer"].is_object()) {
    id["tokenizer"] = j["tokenizer"];
    if (j["tokenizer"].contains("file") && j["tokenizer"]["file"].is_string()) {
      const fs::path t = dir / j["tokenizer"]["file"].get<std::string>();
      TORCH_CHECK(fs::is_regular_file(t), "the corpus's manifest ", (dir / "corpus.json").string(), " names ", t.string(),
                  ", which is missing: make the corpus again (lmscale train corpus --tokenizer ...)");
      *tokenizer_path = t.string();
    }
  } else {
    // Token files without a corpus.json: bytes as tokens is the only tokenizer lmscale can assume.
    id["tokenizer"] = {{"kind", "bytes"}, {"note", "no corpus.json beside the token files: assumed bytes"}};
  }
  return id;
}

bool is_out_of_memory(const std::string& what) {
  return what.find("out of memory") != std::string::npos || what.find("OutOfMemory") != std::string::npos;
}

}  // namespace

Json train_run_fields(const TrainRun& r) {
  const auto& s = r.setup;
  const auto& m = s.model;
  Json fields = model_fields(m);
  fields.update(Json{{field::impl, r.impl},
              {field::context, s.context},
              {field::batch, s.batch},
              {field::precision, r.precision},
              {field::attention, attention_backend_name(m.attention)},
              {field::device, s.device.str()},
              {field::fused, s.fused},
              {field::seed, s.seed},
              {field::steps, r.steps},
              {field::lr, r.lr.peak},
              {field::lr_min, r.lr.floor},
              {field::lr_warmup, r.lr.warmup},
              {field::clip, r.clip},
              {field::eval_every, r.eval_every},
              {field::eval_batches, r.eval_batches},
              {field::corpus, corpus_name(r.train_path)}});
  if (!r.corpus_hash.empty()) {
    fields[field::train_tokens] = r.train_tokens;
    fields[field::val_tokens] = r.val_tokens;
    fields[field::corpus_hash] = r.corpus_hash;
  }
  if (r.pack) fields[field::pack] = true;  // only when on, so the records of runs before --pack still match
  if (s.precision == c10::kFloat8_e4m3fn) {
    fields[field::fp8_min_dim] = s.fp8.min_dim;
    fields[field::fp8_scaling] = fp8_scaling_name(s.fp8.scaling);
  }
  return fields;
}

std::set<int64_t> recorded_evaluations(const std::vector<Json>& records, const TrainRun& run) {
  const Json key = train_run_fields(run);
  std::set<int64_t> steps;
  for (const auto& rec : records) {
    // Only a measured, finite validation loss counts as done (an older lmscale wrote a diverged
    // run's NaN as null with status ok).
    if (rec.value(field::bench, "") != "train" || rec.value(field::metric, "") != "val_loss" ||
        rec.value(field::status, "") != "ok" || !rec.contains(field::step) || !rec.contains(field::value) ||
        !rec[field::value].is_number() || !std::isfinite(rec[field::value].get<double>()))
      continue;
    bool same = true;
    for (const auto& [k, v] : key.items())
      if (!rec.contains(k) || rec[k] != v) same = false;
    if (same) steps.insert(rec[field::step].get<int64_t>());
  }
  return steps;
}

std::string checkpoint_folder(const std::string& out, const std::string& impl, const std::string& precision) {
  return (fs::path(out) / "checkpoints" / (impl + "-" + precision)).string();
}

TrainOutcome run_training(const TrainOptions& o) {
  TORCH_CHECK(!o.precisions.empty() && !o.impls.empty(), "run_training: no precision or impl to run");
  TORCH_CHECK(o.setup_for, "run_training: setup_for is not set");
  const std::string jsonl = (fs::path(o.out) / "train.jsonl").string();
  std::vector<Json> existing;
  if (o.resume && fs::exists(jsonl)) existing = read_records(jsonl, nullptr, &std::cerr);
  const bool terminal = isatty(STDERR_FILENO) && use_colour(true, nullptr, std::getenv("TERM"));

  TrainOutcome outcome;
  std::vector<Json> keys;  // the runs of this invocation, for the comparison
  std::map<int64_t, TrainRun> identity_of_vocab;  // the token files read once per vocabulary
  for (const auto& precision : o.precisions) {
    for (const auto& impl : o.impls) {
      TrainRun run = o.base;
      run.impl = impl;
      run.precision = precision;
      run.setup = o.setup_for(precision);
      run.lr.total = run.steps;
      const int64_t vocab = run.setup.model.vocab_size;
      if (!identity_of_vocab.count(vocab)) {
        identity_of_vocab[vocab] = run;
        set_corpus_identity(identity_of_vocab[vocab]);
      }
      run.train_tokens = identity_of_vocab[vocab].train_tokens;
      run.val_tokens = identity_of_vocab[vocab].val_tokens;
      run.corpus_hash = identity_of_vocab[vocab].corpus_hash;
      ++outcome.runs;
      Json fields = train_run_fields(run);
      keys.push_back(fields);
      Record cell("train", impl);
      cell.update(fields);
      if (is_torch_reference(impl)) cell.set(field::torch_attention, "sdpa");
      const std::string label = impl + " " + precision;
      if (is_torch_reference(impl) && !torch_reference_unsupported(precision).empty()) {
        std::cerr << label << ": skipped: " << torch_reference_unsupported(precision) << "\n";
        if (!o.resume || recorded_evaluations(existing, run).empty())
          append_jsonl(jsonl, {cell.set_status(Status::skipped, torch_reference_unsupported(precision)).failure()});
        continue;
      }
      const std::set<int64_t> recorded = recorded_evaluations(existing, run);
      const std::vector<int64_t> evals = evaluation_steps(run);
      if (std::all_of(evals.begin(), evals.end(), [&](int64_t s) { return recorded.count(s) > 0; })) {
        std::cerr << label << ": every evaluation is in " << jsonl << " already (--resume): not run\n";
        ++outcome.skipped;
        continue;
      }
      TrainProgress progress(std::cerr, terminal, label, run.steps);
      for (const auto& rec : existing)
        if (rec.value(field::metric, "") == "val_loss" && rec.contains(field::step) &&
            recorded.count(rec[field::step].get<int64_t>()) && rec.value(field::impl, "") == impl &&
            rec.value(field::precision, "") == precision && rec[field::value].is_number())
          progress.kept(rec[field::step].get<int64_t>(), rec[field::value].get<double>());
      CheckpointOptions ckpt;
      std::optional<CheckpointInfo> from;
      if (impl == "lmscale") {
        ckpt.dir = checkpoint_folder(o.out, impl, precision);
        ckpt.every = o.save_every;
        ckpt.stop_at = o.stop_at;
        ckpt.keep = o.keep_checkpoints;
        ckpt.config = fields;
        ckpt.corpus = corpus_identity(run, &ckpt.tokenizer_path);
        if (o.resume) from = find_checkpoint(ckpt.dir, fields, std::cerr);
        if (from && from->step >= run.steps) {  // the records lost evaluations the last checkpoint is past
          std::cerr << label << ": checkpoint " << from->path << " is of the last step; replaying from step 0 to "
                    << "measure the evaluations missing from " << jsonl << "\n";
          from.reset();
        }
        if (from) std::cerr << label << ": resuming from checkpoint " << from->path << " (step " << from->step << ")\n";
      }
      TrainCallbacks cb;
      cb.on_step = [&](int64_t s) { progress.step(s); };
      cb.on_checkpoint = [&](const std::string& path, int64_t s) {
        progress.note("checkpoint at step " + std::to_string(s) + ": " + path);
      };
      cb.on_eval = [&](const Evaluation& e) {
        progress.eval(e);
        Record r = cell;
        r.set(field::step, e.step).set(field::lr_now, e.lr).set(field::elapsed_s, e.elapsed_s);
        std::vector<Json> lines{r.metric("val_loss", e.val_loss, "nats")};
        if (!std::isnan(e.train_loss)) lines.push_back(r.metric("train_loss", e.train_loss, "nats"));
        if (!std::isnan(e.grad_norm)) lines.push_back(r.metric("grad_norm", e.grad_norm, ""));
        append_jsonl(jsonl, lines);  // now: an interrupted run keeps every evaluation it finished
      };
      try {
        if (impl == "lmscale") {
          const int64_t last = train_lmscale(run, recorded, cb, ckpt, from);
          if (last < run.steps) {
            progress.stop();
            std::cerr << label << ": stopped after step " << last << " (--stop-at), its checkpoint in " << ckpt.dir
                      << "; continue with the same command and --resume\n";
            ++outcome.stopped;
          }
        } else
          train_torch_reference(run, recorded, cb);
      } catch (const ResultWriteError&) {
        throw;  // a results folder that cannot be written ends the invocation
      } catch (const TrainingDiverged& d) {  // Note [divergence]: the run stops, the others go on
        progress.stop();
        std::cerr << label << ": " << d.what() << "\n";
        append_jsonl(jsonl, {Record(cell).set(field::step, d.step()).set_status(Status::diverged, d.what()).failure()});
        ++outcome.failures;
        ++outcome.diverged;
      } catch (const std::exception& e) {
        const std::string what = e.what();
        const std::string reason = what.substr(0, what.find('\n'));
        const Status st = is_out_of_memory(what) ? Status::oom : Status::error;
        std::cerr << label << ": " << to_string(st) << ": " << reason << "\n";
        append_jsonl(jsonl, {cell.set_status(st, reason).failure()});
        if (st != Status::oom) ++outcome.failures;
      }
    }
  }
  if (keys.size() > 1) {
    outcome.comparison = loss_comparison(read_records(jsonl, nullptr, &std::cerr), keys, o.base.lr.warmup);
    write_text((fs::path(o.out) / "train_compare.md").string(), outcome.comparison);
  }
  return outcome;
}

}  // namespace lmscale
