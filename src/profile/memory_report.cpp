// The memory report; see memory_report.h.
#include "profile/memory_report.h"

#include <iostream>

#include "core/device.h"
#include "core/error.h"
#include "core/python_module.h"
#include "core/status.h"
#include "core/sweep_progress.h"
#include "profile/memory_run.h"
#include "results/table.h"
#include "results/writer.h"

namespace lmscale {
namespace {

StepSetup make_setup(const MemoryReportOptions& a, int64_t context, const std::string& precision, c10::Device dev) {
  StepSetup s = a.base;
  s.model.context_length = std::max(s.model.context_length, context);
  s.context = context;
  s.batch = a.batch;
  s.precision = parse_dtype(precision);
  s.device = dev;
  return s;
}

Record config_record(const MemoryReportOptions& a, int64_t context, const std::string& precision,
                     const std::string& mode) {
  Record r("memory", "lmscale-" + a.attention);
  r.update(Json{{field::size, a.size},      {field::context, context}, {field::batch, a.batch},
                {field::precision, precision}, {field::mode, mode},     {field::attention, a.attention}});
  return r;
}

std::string peak_table(const MemoryReportOptions& a, c10::Device dev, std::vector<Json>* records) {
  MarkdownTable t({"size", "context", "precision", "mode", "after init", "peak allocated", "fp32 residual (B·T·d·4)"});
  const int64_t d = a.base.model.d_model;
  SweepProgress bar(a.contexts.size() * a.precisions.size() * a.modes.size());
  std::string notes;
  for (const auto& mode : a.modes) {
    for (const auto& prec : a.precisions) {
      for (int64_t ctx : a.contexts) {
        bar.begin(a.size + " context " + std::to_string(ctx) + " " + prec + " " + mode);
        const PeakCell c = measure_peak(make_setup(a, ctx, prec, dev), parse_mode(mode), a.warmup, a.steps);
        const int64_t resid = residual_activation_bytes(a.batch, ctx, d);
        const bool ok = c.status == "ok";
        bar.end(status_from_string(c.status), ok ? fmt_bytes(c.peak) : c.status);
        t.add_row({a.size, std::to_string(ctx), prec, mode, ok ? fmt_bytes(c.after_init) : c.status,
                   ok ? fmt_bytes(c.peak) : c.status, fmt_bytes(resid)});
        if (!c.note.empty() && notes.find(c.note) == std::string::npos) notes += "- " + c.status + ": " + c.note + "\n";
        Record cell = config_record(a, ctx, prec, mode);
        cell.set_status(c.status, c.note).set("residual_activation_bytes", resid);
        cell.set(field::warmup, a.warmup).set(field::steps, a.steps);
        if (ok) cell.set("after_init_bytes", c.after_init);
        records->push_back(cell.metric("peak_allocated_bytes", ok ? Json(c.peak) : Json(nullptr), "bytes"));
      }
    }
  }
  const auto count = [](int n, const char* what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); };
  return "## Peak memory, batch " + std::to_string(a.batch) + " (over " + count(a.steps, "steady-state step") +
         " after " + count(a.warmup, "warm-up step") + ")\n\n" +
         t.render() + (notes.empty() ? "" : "\n" + notes) +
         "\nForward = inference (no autograd, no activations kept); train-step = forward + backward + AdamW, "
         "fp32 weights, gradients and optimizer state (bf16 = autocast).\n\n";
}

std::string snapshot_section(const MemoryReportOptions& a, c10::Device dev, const std::string& mode, std::vector<Json>* records) {
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

}  // namespace

void run_memory_report(const MemoryReportOptions& a) {
  check_output_folder(a.out);  // before the first measurement, not after it
  const c10::Device dev = resolve_device(a.device);
  set_run_gpu(device_name(dev));
  std::vector<Json> records;
  const int64_t d = a.base.model.d_model;
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


}  // namespace lmscale
