// `lmscale report`: merges result folders into one (by default docs/results, when run at the top of
// an lmscale checkout), rebuilds every table from the merged records, draws the plots and writes
// index.md. The work is write_report (results/report.h); tables are never typed by hand or copied
// from a run.
#include <filesystem>
#include <iostream>

#include "cli/registry.h"
#include "core/error.h"
#include "results/report.h"

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
  app.footer("Example: lmscale report --in results --in run2 --out docs/results");
  app.callback([o, no_plots, &app] {
    o->plots = !*no_plots;
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
