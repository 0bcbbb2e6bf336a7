// `lmscale memory`: the peak-memory table (size × context × precision × forward/train-step, OOM
// cells), memory-history snapshots for PyTorch's memory viewer, the largest allocations live at
// the peak and where they come from, the fp32 residual-activation size, and the active-memory
// timeline (JSON, plotted to PNG by `python -m lmscale.plots memory`). Measuring is bench/memory_run.
#include <cstdlib>
#include <iostream>

#include "profile/memory_run.h"
#include "cli/registry.h"
#include "core/device.h"
#include "core/error.h"
#include "core/python_module.h"
#include "core/record.h"
#include "core/results.h"
#include "model/config.h"

namespace {

using namespace lmscale;

struct MemoryArgs {
  std::string size = "2.7B", attention = "naive", device = "auto", out = "results", stacks = "python";
  std::vector<int64_t> contexts{128, 256, 512};
  std::vector<std::string> precisions{"fp32", "bf16"}, modes{"forward", "train-step"};
  int64_t batch = 4;
  int64_t snapshot_context = 0;  // 0: the first --contexts entry
  std::string snapshot_precision;  // "": the first --precisions entry
  int snapshot_steps = 2, top = 10;
  bool table = true, snapshot = true, plot = true;
};

StepSetup make_setup(const MemoryArgs& a, int64_t context, const std::string& precision, c10::Device dev) {
  StepSetup s;
  s.model = model_config(a.size);
  s.model.attention = parse_attention_backend(a.attention);
  s.model.context_length = std::max(s.model.context_length, context);
  s.context = context;
  s.batch = a.batch;
  s.precision = parse_dtype(precision);
  s.device = dev;
  return s;
}

Record config_record(const MemoryArgs& a, int64_t context, const std::string& precision, const std::string& mode) {
  Record r("memory", "lmscale-" + a.attention);
  r.update(Json{{field::size, a.size},      {field::context, context}, {field::batch, a.batch},
                {field::precision, precision}, {field::mode, mode},     {field::attention, a.attention}});
  return r;
}

std::string peak_table(const MemoryArgs& a, c10::Device dev, std::vector<Json>* records) {
  MarkdownTable t({"size", "context", "precision", "mode", "after init", "peak allocated", "fp32 residual (B·T·d·4)"});
  const int64_t d = model_config(a.size).d_model;
  const size_t total = a.contexts.size() * a.precisions.size() * a.modes.size();
  size_t n = 0;
  std::string notes;
  for (const auto& mode : a.modes) {
    for (const auto& prec : a.precisions) {
      for (int64_t ctx : a.contexts) {
        ++n;
        std::cout << "[" << n << "/" << total << "] " << a.size << " context " << ctx << " " << prec << " " << mode
                  << " ... " << std::flush;
        const PeakCell c = measure_peak(make_setup(a, ctx, prec, dev), parse_mode(mode));
        const int64_t resid = residual_activation_bytes(a.batch, ctx, d);
        const bool ok = c.status == "ok";
        std::cout << (ok ? fmt_bytes(c.peak) : c.status) << "\n";
        t.add_row({a.size, std::to_string(ctx), prec, mode, ok ? fmt_bytes(c.after_init) : c.status,
                   ok ? fmt_bytes(c.peak) : c.status, fmt_bytes(resid)});
        if (!c.note.empty() && notes.find(c.note) == std::string::npos) notes += "- " + c.status + ": " + c.note + "\n";
        Record cell = config_record(a, ctx, prec, mode);
        cell.set_status(c.status, c.note).set("residual_activation_bytes", resid);
        if (ok) cell.set("after_init_bytes", c.after_init);
        records->push_back(cell.metric("peak_allocated_bytes", ok ? Json(c.peak) : Json(nullptr), "bytes"));
      }
    }
  }
  return "## Peak memory, batch " + std::to_string(a.batch) + " (one steady-state step after a warm-up step)\n\n" +
         t.render() + (notes.empty() ? "" : "\n" + notes) +
         "\nForward = inference (no autograd, no activations kept); train-step = forward + backward + AdamW, "
         "fp32 weights, gradients and optimizer state (bf16 = autocast).\n\n";
}

std::string snapshot_section(const MemoryArgs& a, c10::Device dev, const std::string& mode, std::vector<Json>* records) {
  const int64_t ctx = a.snapshot_context ? a.snapshot_context : a.contexts.front();
  const std::string prec = a.snapshot_precision.empty() ? a.precisions.front() : a.snapshot_precision;
  const std::string stem = a.out + "/memory_" + a.size + "_ctx" + std::to_string(ctx) + "_" + prec + "_" + mode;
  std::cout << "recording memory history: " << a.size << " context " << ctx << " " << prec << " " << mode << ", "
            << a.snapshot_steps << " step(s) ... " << std::flush;
  MemoryRecording rec;
  try {
    rec = record_memory(make_setup(a, ctx, prec, dev), parse_mode(mode), a.snapshot_steps, stem + ".pickle", a.stacks);
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
    release_cached_memory(dev);
    std::cout << "OOM\n";
    return "## Snapshot " + mode + ": OOM at context " + std::to_string(ctx) + " " + prec +
           " (pick a smaller --snapshot-context)\n\n";
  }
  const auto& tl = rec.timeline;
  std::cout << rec.events.size() << " events, peak " << fmt_bytes(tl.peak_bytes) << "\n";
  Json tj = timeline_json(tl, rec.events, a.top);
  tj["config"] = {{field::size, a.size},           {field::context, ctx},         {field::batch, a.batch},
                  {field::precision, prec},         {field::mode, mode},           {field::steps, a.snapshot_steps},
                  {field::gpu, run_info().gpu},     {field::commit, run_info().commit},
                  {field::date, run_info().date},   {field::command, run_info().command}};
  const std::string timeline_path = write_text(stem + "_timeline.json", tj.dump(1));
  std::string png = stem + "_timeline.png";
  std::string plot_note;
  if (a.plot) {
    const std::string problem = run_python_module("lmscale.plots", {"memory", timeline_path, png}, {}, "matplotlib");
    if (!problem.empty()) {
      plot_note = "(plot not drawn: " + problem + ")\n\n";
      std::cerr << "memory: " << plot_note;
      png.clear();
    }
  }
  records->push_back(config_record(a, ctx, prec, mode)
                         .update(Json{{"events", rec.events.size()},
                                      {"pickle", rec.pickle_path},
                                      {"timeline", timeline_path},
                                      {"largest_live_at_peak", tj["largest_live_at_peak"]},
                                      {"origins_at_peak", tj["origins_at_peak"]}})
                         .metric("snapshot_peak_bytes", tl.peak_bytes, "bytes"));

  MarkdownTable blocks({"#", "size", "phase", "allocated by"});
  for (size_t i = 0; i < tl.live_at_peak.size() && i < static_cast<size_t>(a.top); ++i) {
    const auto& b = tl.live_at_peak[i];
    blocks.add_row({std::to_string(i + 1), fmt_bytes(b.size), b.phase, "`" + b.where + "`"});
  }
  MarkdownTable origins({"#", "bytes live at peak", "blocks", "phase", "allocated by"});
  for (size_t i = 0; i < tl.origins_at_peak.size() && i < static_cast<size_t>(a.top); ++i) {
    const auto& o = tl.origins_at_peak[i];
    origins.add_row({std::to_string(i + 1), fmt_bytes(o.bytes), std::to_string(o.blocks), o.phase,
                     "`" + o.where + "`"});
  }
  return "## Snapshot " + mode + ": " + a.size + ", context " + std::to_string(ctx) + ", " + prec + ", " +
         std::to_string(a.snapshot_steps) + " step(s)\n\n" + "Peak " + fmt_bytes(tl.peak_bytes) + " at event " +
         std::to_string(tl.peak_event) + " of " + std::to_string(rec.events.size()) + " (" +
         fmt_bytes(tl.baseline) + " live before recording). Memory viewer: drag `" + rec.pickle_path +
         "` onto https://pytorch.org/memory_viz. Timeline: `" + timeline_path + "`" +
         (png.empty() ? "" : ", plot `" + png + "`") + ".\n\n" + plot_note +
         "Largest blocks live at the peak:\n\n" + blocks.render() + "\nLive bytes at the peak by origin:\n\n" +
         origins.render() + "\n";
}

void run(const MemoryArgs& a) {
  const c10::Device dev = resolve_device(a.device);
  set_run_gpu(device_name(dev));
  std::vector<Json> records;
  const int64_t d = model_config(a.size).d_model;
  std::string md = "# Memory: " + a.size + " (d_model " + std::to_string(d) + "), batch " + std::to_string(a.batch) +
                   ", attention " + a.attention + ", " + run_info().gpu + "\n\n";
  md += "One fp32 residual-stream activation is B·T·d·4 bytes:";
  for (int64_t ctx : a.contexts) {
    const int64_t r = residual_activation_bytes(a.batch, ctx, d);
    md += " T=" + std::to_string(ctx) + ": " + fmt_bytes(r) + ";";
    records.push_back(config_record(a, ctx, "fp32", "residual").metric("residual_activation_bytes", r, "bytes"));
  }
  md += "\n\n";
  const std::string why = memory_unsupported_reason(dev);
  if (!why.empty()) std::cout << "note: " << why << "; peak cells are n/a and snapshots are skipped\n";
  if (a.table) md += peak_table(a, dev, &records);
  if (a.snapshot) {
    if (why.empty()) {
      for (const auto& mode : a.modes) md += snapshot_section(a, dev, mode, &records);
    } else {
      md += "Snapshots skipped: " + why + ".\n\n";
    }
  }
  md += "_command: `" + run_info().command + "`, commit " + run_info().commit + ", " + run_info().date + "_\n";
  std::cout << md;
  append_jsonl(a.out + "/memory.jsonl", records);
  std::cout << "wrote " << write_text(a.out + "/memory.md", md) << " and " << a.out << "/memory.jsonl\n";
}

}  // namespace

LMSCALE_SUBCOMMAND("", "memory", "peak-memory table, memory-viewer snapshots, largest allocations, timeline plot",
                   [](CLI::App& app) {
                     auto a = std::make_shared<MemoryArgs>();
                     app.add_option("--size", a->size, "model size")->capture_default_str();
                     app.add_option("--contexts", a->contexts, "context lengths T")->capture_default_str();
                     app.add_option("--precisions", a->precisions, "fp32 and/or bf16 (autocast)")
                         ->capture_default_str();
                     app.add_option("--modes", a->modes, "forward and/or train-step")->capture_default_str();
                     app.add_option("--batch", a->batch, "batch size B")->capture_default_str();
                     app.add_option("--attention", a->attention, "naive, sdpa or flash")->capture_default_str();
                     app.add_option("--device", a->device, "auto, cuda, cuda:N (cpu gives n/a)")
                         ->capture_default_str();
                     app.add_option("--snapshot-context", a->snapshot_context, "context of the snapshots (default: "
                                                                               "first of --contexts)");
                     app.add_option("--snapshot-precision", a->snapshot_precision,
                                    "precision of the snapshots (default: first of --precisions)");
                     app.add_option("--snapshot-steps", a->snapshot_steps, "steps recorded per snapshot")
                         ->capture_default_str();
                     app.add_option("--stacks", a->stacks, "python (no C++ frames, fast) or all (C++ frames, slow)")
                         ->capture_default_str();
                     app.add_option("--top", a->top, "rows of largest blocks / origins")->capture_default_str();
                     app.add_flag("!--no-table", a->table, "skip the peak-memory sweep");
                     app.add_flag("!--no-snapshot", a->snapshot, "skip the memory-history snapshots");
                     app.add_flag("!--no-plot", a->plot, "do not draw the timeline PNG (python -m lmscale.plots memory)");
                     app.add_option("--out", a->out, "results folder")->capture_default_str();
                     app.callback([a] { run(*a); });
                   });
