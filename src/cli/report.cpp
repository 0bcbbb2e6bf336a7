// `lmscale report`: merges result folders into one (docs/results by default), rebuilds every table
// from the merged records, draws the plots and writes index.md. The work is write_report
// (results/report.h); tables are never typed by hand or copied from a run.
#include <iostream>

#include "cli/registry.h"
#include "results/report.h"

LMSCALE_SUBCOMMAND("", "report", "merge result folders: tables rebuilt from the records, plots, index.md", [](CLI::App& app) {
  auto o = std::make_shared<lmscale::ReportOptions>();
  auto no_plots = std::make_shared<bool>(false);
  app.add_option("--in", o->inputs, "result folder(s) written by benchmarks (the --out of those runs)")->required();
  app.add_option("--out", o->out, "destination folder")->capture_default_str();
  app.add_flag("--no-plots", *no_plots, "skip the PNG plots (python -m lmscale.plots report OUT draws them later)");
  app.footer("Example: lmscale report --in results --in run2 --out docs/results");
  app.callback([=] {
    o->plots = !*no_plots;
    lmscale::write_report(*o);
  });
});
