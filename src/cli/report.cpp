// `lmscale report`: merges result folders into one (by default docs/results, when run at the top of
// an lmscale checkout), rebuilds every table from the merged records, draws the plots and writes
// index.md. The work is write_report (results/merged_report.h); tables are never typed by hand or copied
// from a run. --export csv|tensorboard DIR writes the records for other tools (results/export.h).
#include <filesystem>
#include <iostream>

#include "cli/registry.h"
#include "core/error.h"
#include "results/export.h"
#include "results/merged_report.h"

namespace {

// The default --out: docs/results when the command runs at the top of an lmscale checkout (its
// `lmscale` script and docs/results/SCHEMA.md are here), so it never lands in a docs/results of
// whatever other project the command is run in. "" elsewhere: then --out must be given.
std::string default_out() {
  std::error_code ec;
  const bool checkout = std::filesystem::is_regular_file("lmscale", ec) &&
                        std::filesystem::is_regular_file("docs/results/SCHEMA.md", ec);
  return checkout ? "docs/results" : "";
}

}  // namespace

LMSCALE_SUBCOMMAND("", "report", "merge result folders: tables rebuilt from the records, plots, index.md", [](CLI::App& app) {
  auto o = std::make_shared<lmscale::ReportOptions>();
  o->out.clear();
  auto no_plots = std::make_shared<bool>(false);
  app.add_option("--in", o->inputs, "result folder(s) written by benchmarks (the --out of those runs)")->required();
  app.add_option("--out", o->out, "destination folder (default: docs/results, at the top of an lmscale checkout; "
                                  "needed anywhere else)");
  app.add_flag("--no-plots", *no_plots, "skip the PNG plots (python -m lmscale.plots report OUT draws them later)");
  auto export_args = std::make_shared<std::vector<std::string>>();
  app.add_option("--export", *export_args,
                 "FORMAT DIR: also write the records as csv (DIR/<bench>.csv, one row per record) or tensorboard "
                 "(event files of train.jsonl's loss curves, one folder per run); without --out, only this is "
                 "done, from the --in folders")
      ->expected(2)
      ->type_name("FORMAT DIR");
  app.footer("Examples: lmscale report --in results --in run2 --out docs/results\n"
             "          lmscale report --in results --export csv exported   (pandas: SCHEMA.md, \"Reading records with pandas\")\n"
             "          lmscale report --in results --export tensorboard tb && tensorboard --logdir tb");
  app.callback([o, no_plots, export_args, &app] {
    o->plots = !*no_plots;
    // --export alone: no report folder is written (no default docs/results), the --in records go out.
    if (!export_args->empty()) {
      const lmscale::ExportFormat format = lmscale::parse_export_format(export_args->at(0));
      const bool also_report = app.count("--out") > 0;
      bool plots_missing = false;
      if (also_report) {
        const lmscale::ReportSummary s = lmscale::write_report(*o);
        plots_missing = o->plots && !s.plot_problem.empty();
      }
      const auto records = lmscale::records_of_folders(also_report ? std::vector<std::string>{o->out} : o->inputs);
      const lmscale::ExportSummary e = lmscale::export_records(records, format, export_args->at(1));
      std::cout << "report: exported " << e.records << (format == lmscale::ExportFormat::kCsv ? " records" : " scalars")
                << " into " << export_args->at(1) << ": ";
      for (size_t i = 0; i < e.files.size(); ++i) std::cout << (i ? ", " : "") << e.files[i];
      std::cout << "\n";
      if (plots_missing)
        throw std::runtime_error("the plots were not drawn (see above; the tables, index.md and the export are "
                                 "written): use an interpreter with matplotlib (LMSCALE_PYTHON=...), or pass --no-plots");
      return;
    }
    if (o->out.empty() && app.count("--out") == 0) {
      // A missing --in is the first thing to say (write_report's words), before any word on --out.
      for (const auto& in : o->inputs)
        if (!std::filesystem::is_directory(in))
          throw lmscale::UsageError("--in " + in + " is not a folder: pass the --out folder of a benchmark run (e.g. "
                                    "--in results)");
      o->out = default_out();
      if (o->out.empty())
        throw lmscale::UsageError("--out is needed here: this folder is not the top of an lmscale checkout, whose "
                                  "docs/results is the default; pass the folder to write, e.g. --out report");
    }
    const lmscale::ReportSummary s = lmscale::write_report(*o);
    // Plots asked for and not drawn: the tables and index are written, but the run did not do what it
    // was asked; the message above says why and how to draw them.
    if (o->plots && !s.plot_problem.empty())
      throw std::runtime_error("the plots were not drawn (see above; the tables and index.md are written): use an "
                               "interpreter with matplotlib (LMSCALE_PYTHON=...), or pass --no-plots");
  });
});
