// `lmscale report`: gathers benchmark outputs (JSON Lines + markdown tables, plots, traces) from
// result folders into docs/results/, skipping records already there, then draws the PNG plots
// (scripts/plot_results.py) and writes an index. Tables are never typed by hand: they come from here.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "cli/registry.h"
#include "core/results.h"

namespace fs = std::filesystem;

namespace {

std::set<std::string> existing_lines(const fs::path& p) {
  std::set<std::string> lines;
  std::ifstream f(p);
  std::string l;
  while (std::getline(f, l)) lines.insert(l);
  return lines;
}

// Appends the new lines of src to dst; returns how many were new.
int merge_jsonl(const fs::path& src, const fs::path& dst) {
  auto have = existing_lines(dst);
  std::ifstream in(src);
  std::ofstream out(dst, std::ios::app);
  TORCH_CHECK(out, "cannot write ", dst.string(), ": check that --out is writable");
  int added = 0;
  std::string l;
  while (std::getline(in, l)) {
    if (l.find_first_not_of(" \t\r") == std::string::npos || have.count(l)) continue;
    (void)nlohmann::json::parse(l);  // refuse to spread a corrupt line
    out << l << '\n';
    have.insert(l);
    ++added;
  }
  return added;
}

void report(const std::vector<std::string>& inputs, const std::string& out_dir, bool plots) {
  fs::create_directories(out_dir);
  const fs::path out = fs::canonical(out_dir);
  for (const auto& in : inputs) {
    TORCH_CHECK(fs::is_directory(in), "--in ", in, " is not a folder: pass the --out folder of a benchmark run");
    for (const auto& e : fs::recursive_directory_iterator(in)) {
      if (!e.is_regular_file()) continue;
      const auto ext = e.path().extension().string();
      // Records merge by file name (they carry their own command); human files from a sub-folder
      // keep it as a prefix, so baselines/e2e.md does not overwrite the top-level e2e.md.
      std::string rel = fs::relative(e.path(), in).string();
      if (ext != ".jsonl") std::replace(rel.begin(), rel.end(), '/', '_');
      const fs::path dst = out / (ext == ".jsonl" ? e.path().filename().string() : rel);
      if (fs::equivalent(e.path().parent_path(), out)) continue;
      if (ext == ".jsonl") {
        std::cout << e.path().string() << ": " << merge_jsonl(e.path(), dst) << " new records → " << dst.string()
                  << "\n";
      } else if (ext == ".md" || ext == ".png" || ext == ".json" || ext == ".pickle" || ext == ".gz") {
        fs::copy_file(e.path(), dst, fs::copy_options::overwrite_existing);
        std::cout << e.path().string() << " → " << dst.string() << "\n";
      }
    }
  }
  if (plots) {
    const char* py = std::getenv("LMSCALE_PYTHON");
    std::string cmd = std::string("'") + (py && *py ? py : "python3") + "' '" LMSCALE_SOURCE_DIR
                      "/scripts/plot_results.py' '" + out.string() + "'";
    if (std::system(cmd.c_str()) != 0)
      std::cerr << "plots skipped (needs matplotlib); run later: " << cmd << "\n";
  }
}

}  // namespace

LMSCALE_SUBCOMMAND("", "report", "gather result folders into docs/results (tables, plots, index)", [](CLI::App& app) {
  auto inputs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>("docs/results");
  auto no_plots = std::make_shared<bool>(false);
  app.add_option("--in", *inputs, "result folder(s) written by benchmarks (--out of those runs)")->required();
  app.add_option("--out", *out, "destination (default docs/results)");
  app.add_flag("--no-plots", *no_plots, "skip the PNG plots");
  app.callback([=] { report(*inputs, *out, !*no_plots); });
});
