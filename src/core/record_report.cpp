// Merging result folders into one; see record_report.h.
#include "core/record_report.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "core/python_module.h"
#include "core/record.h"
#include "core/record_table.h"

namespace lmscale {
namespace fs = std::filesystem;
namespace {

// Files a run writes besides records that are worth keeping (traces, snapshots, timelines).
// Tables (.md) and plots (.png) are not among them: they are rebuilt from the records.
bool is_artifact(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".pickle" || ext == ".gz" || ext == ".json";
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The records of one .jsonl stem, in the order first seen, each once.
struct Merged {
  std::vector<Json> records;
  std::set<std::string> seen;
  size_t added = 0;
  bool add(Json r) {
    if (!seen.insert(r.dump()).second) return false;
    records.push_back(std::move(r));
    return true;
  }
};

// Draws every plot the records allow; returns the plots written (relative to out) or sets *problem.
std::vector<std::string> draw_plots(const fs::path& out, std::string* problem) {
  std::vector<std::string> plots;
  *problem = run_python_module("lmscale.plots", {"report", out.string()}, [&](const std::string& line) {
    std::cout << "  " << line << "\n";
    const std::string tag = "wrote ";
    if (line.rfind(tag, 0) == 0) plots.push_back(fs::path(line.substr(tag.size())).filename().string());
  }, "matplotlib");
  return plots;
}

std::string index_page(const ReportSummary& s, const std::map<std::string, Merged>& merged) {
  std::string md = "# Results index\n\nWritten by `lmscale report` (" + run_info().date +
                   "): every table below is rebuilt from the records in the `.jsonl` files beside it; "
                   "the fields are explained in [SCHEMA.md](SCHEMA.md).\n\n## Tables\n\n";
  for (const auto& t : s.tables) {
    const std::string stem = fs::path(t).stem().string();
    std::set<std::string> gpus;
    for (const auto& r : merged.at(stem).records) gpus.insert(r.value("gpu", "?"));
    std::string on;
    for (const auto& g : gpus) on += (on.empty() ? "" : ", ") + g;
    md += "- [" + t + "](" + t + ") — " + std::to_string(merged.at(stem).records.size()) + " records in [" + stem +
          ".jsonl](" + stem + ".jsonl), " + on + "\n";
  }
  if (!s.plots.empty() || !s.plot_problem.empty()) md += "\n## Plots\n\n";
  for (const auto& p : s.plots) md += "- [" + p + "](" + p + ")\n";
  if (!s.plot_problem.empty()) md += "- " + s.plot_problem + "\n";
  if (!s.files.empty()) {
    md += "\n## Other files (traces, memory snapshots, timelines)\n\n";
    for (const auto& f : s.files) md += "- [" + f + "](" + f + ")\n";
  }
  return md;
}

}  // namespace

ReportSummary write_report(const ReportOptions& o) {
  TORCH_CHECK(!o.inputs.empty(), "no --in folder: pass the --out folder of one or more benchmark runs");
  for (const auto& in : o.inputs)
    TORCH_CHECK(fs::is_directory(in), "--in ", in, " is not a folder: pass the --out folder of a benchmark run");
  std::error_code ec;
  fs::create_directories(o.out, ec);
  TORCH_CHECK(!ec, "cannot create --out ", o.out, ": ", ec.message());
  const fs::path out = fs::canonical(o.out);
  ReportSummary s;
  ReadStats stats;
  std::map<std::string, Merged> merged;

  // What the output folder already holds comes first, so running report twice adds nothing.
  for (const auto& e : fs::directory_iterator(out))
    if (e.is_regular_file() && e.path().extension() == ".jsonl")
      for (auto& r : read_records(e.path().string(), &stats)) merged[e.path().stem().string()].add(std::move(r));

  for (const auto& in : o.inputs) {
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(in))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& p : files) {
      if (fs::equivalent(p.parent_path(), out)) continue;
      if (p.extension() == ".jsonl") {
        // Records merge by file name (they carry their own provenance): two ddp folders make one table.
        Merged& m = merged[p.stem().string()];
        size_t added = 0;
        for (auto& r : read_records(p.string(), &stats)) added += m.add(std::move(r));
        m.added += added;
        s.new_records += added;
        std::cout << p.string() << ": " << added << " new records"
                  << (added ? " → " + (out / p.filename()).string() : std::string()) << "\n";
      } else if (is_artifact(p)) {
        // From a sub-folder, the folder names become a prefix: baselines/x.json does not overwrite x.json.
        std::string rel = fs::relative(p, in).string();
        std::replace(rel.begin(), rel.end(), '/', '_');
        write_text((out / rel).string(), read_file(p));
        std::cout << p.string() << " → " << (out / rel).string() << "\n";
      }
    }
  }

  for (auto& [stem, m] : merged) {
    if (m.added) {  // rewritten whole (old records in today's names), atomically
      std::string text;
      for (const auto& r : m.records) text += r.dump() + "\n";
      write_text((out / (stem + ".jsonl")).string(), text);
    }
    if (m.records.empty()) continue;
    const std::string table = stem + ".md";
    write_text((out / table).string(),
               "# " + stem + "\n\n" + records_table("The records of " + stem + ".jsonl", m.records) +
                   "\n_Rebuilt by `lmscale report` from " + stem + ".jsonl; do not edit by hand. Fields not shown "
                   "(the model's shape, baseline details, per-step times) are in the records._\n");
    s.tables.push_back(table);
  }
  for (const auto& e : fs::directory_iterator(out))
    if (e.is_regular_file() && is_artifact(e.path())) s.files.push_back(e.path().filename().string());
  std::sort(s.files.begin(), s.files.end());
  s.skipped_lines = stats.skipped;
  s.newer_records = stats.newer;
  if (o.plots) s.plots = draw_plots(out, &s.plot_problem);
  if (!s.plot_problem.empty()) std::cerr << "report: " << s.plot_problem << "\n";
  write_text((out / "index.md").string(), index_page(s, merged));
  std::cout << "report: " << s.new_records << " new records, " << s.tables.size() << " tables, " << s.plots.size()
            << " plots, index " << (out / "index.md").string() << "\n";
  if (s.newer_records)
    std::cout << "report: " << s.newer_records
              << " records of a newer schema passed through unchanged (a newer lmscale reads them fully)\n";
  if (s.skipped_lines)
    std::cerr << "report: " << s.skipped_lines << " damaged lines skipped (see the warnings above)\n";
  return s;
}

}  // namespace lmscale
