// Merging result folders into one; see merged_report.h.
#include "results/merged_report.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/python_module.h"
#include "results/reader.h"
#include "results/table.h"
#include "results/views.h"
#include "results/writer.h"

namespace lmscale {
namespace fs = std::filesystem;
namespace {

// Files a run writes besides records that are worth keeping (traces, snapshots, timelines).
// Tables (.md) and plots (.png) are not among them: they are rebuilt from the records. Nor is
// tables.json, which names tables and is merged, not copied.
bool is_artifact(const fs::path& p) {
  const std::string ext = p.extension().string();
  return (ext == ".pickle" || ext == ".gz" || ext == ".json") && p.filename() != "tables.json";
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

std::string run_count(const std::vector<Json>& records) {
  std::set<std::string> runs;
  for (const auto& r : records) runs.insert(r.contains("run") ? r.value("run", "?") : r.value("date", "?") + r.value("command", "?"));
  return std::to_string(runs.size()) + (runs.size() == 1 ? " run" : " runs");
}

std::string gpus_of(const std::vector<Json>& records) {
  std::set<std::string> gpus;
  for (const auto& r : records) gpus.insert(r.value("gpu", "?"));
  std::string on;
  for (const auto& g : gpus) on += (on.empty() ? "" : ", ") + g;
  return on;
}

std::string link(const std::string& f) { return "[" + f + "](" + f + ")"; }

// What a file report did not make is, going by its name (for the index).
std::string kind_of_other(const std::string& name) {
  if (name.back() == '/') return "a folder of its own (its records are merged only when it is given as --in)";
  if (name.find("transcript") != std::string::npos) return "transcript, written by a script (no records behind it)";
  const std::string ext = fs::path(name).extension().string();
  if (ext == ".md") return "page written by hand or by a command, not from records (no records behind it)";
  if (ext == ".log" || ext == ".txt") return "log of a run (no records behind it)";
  if (ext == ".damaged") return "lines of a records file that are not records, moved aside by `lmscale report` (mend them by hand)";
  return "not made by `lmscale report`";
}

// Every folder below `out` that says what it is (a README.md), with that page's first line, in path
// order: the topic folders and the dated runs (runs/<date>-<commit>-<topic>/) with their sub-folders.
std::string folders_section(const fs::path& out) {
  std::vector<std::pair<std::string, std::string>> found;
  for (const auto& e : fs::recursive_directory_iterator(out)) {
    if (!e.is_directory() || e.is_symlink() || !fs::is_regular_file(e.path() / "README.md")) continue;
    std::ifstream f(e.path() / "README.md");
    std::string first;
    std::getline(f, first);
    first.erase(0, first.find_first_not_of("# "));
    found.emplace_back(fs::relative(e.path(), out).generic_string(), first);
  }
  if (found.empty()) return "";
  std::sort(found.begin(), found.end());
  std::string md = "\n## Folders (each with the first line of its README.md)\n\n";
  for (const auto& [rel, first] : found) md += "- [" + rel + "/](" + rel + "/README.md) — " + first + "\n";
  return md;
}

std::string index_page(const fs::path& out, const ReportSummary& s, const std::map<std::string, Merged>& merged,
                       const std::vector<TableView>& views) {
  const std::string schema = fs::exists(out / "SCHEMA.md") ? "[SCHEMA.md](SCHEMA.md)" : "docs/results/SCHEMA.md";
  std::string md = "# Results index\n\nWritten by `lmscale report` (" + run_info().date +
                   "): every table below is rebuilt from the records in the `.jsonl` files beside it, never "
                   "copied from a run; the fields are explained in " + schema + ".\n\n";
  if (!s.tables.empty()) md += "## Tables, one per records file\n\n";
  for (const auto& t : s.tables) {
    const std::string stem = fs::path(t).stem().string();
    const auto& records = merged.at(stem).records;
    md += "- " + link(t) + " — every record of " + link(stem + ".jsonl") + ": " + std::to_string(records.size()) +
          " records, " + run_count(records) + ", " + gpus_of(records) + "\n";
  }
  if (!views.empty()) {
    md += "\n## Named tables (a selection of one records file each, defined in [tables.json](tables.json))\n\n";
    for (const auto& v : views) {
      const bool written = std::count(s.named_tables.begin(), s.named_tables.end(), v.file) > 0;
      md += "- " + (written ? link(v.file) : v.file) + " — " + v.title + ": " + v.records + ".jsonl where " +
            describe_selection(v) + (written ? "" : " — **selects no record: not written**") + "\n";
    }
  }
  if (!s.plots.empty() || !s.plot_problem.empty()) md += "\n## Plots\n\n";
  for (const auto& p : s.plots) md += "- " + link(p) + "\n";
  // The problem itself (stderr) names this machine's folders; a committed page must not.
  if (!s.plot_problem.empty())
    md += "- not drawn by this run (the plotting interpreter failed; `lmscale report` printed why); "
          "`python -m lmscale.plots report <this folder>` draws them\n";
  if (!s.files.empty()) {
    md += "\n## Traces, memory snapshots, timelines (copied from the runs)\n\n";
    for (const auto& f : s.files) md += "- " + link(f) + "\n";
  }
  if (!s.other.empty()) {
    md += "\n## Not rebuilt from records\n\nPages, transcripts and logs written by hand or by scripts; "
          "`lmscale report` leaves them as they are.\n\n";
    for (const auto& f : s.other) md += "- " + link(f) + " — " + kind_of_other(f) + "\n";
  }
  return md + folders_section(out);
}

// The named tables: those of the output folder, then each input's (an input's entry replaces one of
// the same file name, so editing the tables.json of the folder being merged takes effect).
std::vector<TableView> gather_views(const fs::path& out, const std::vector<std::string>& inputs) {
  std::vector<TableView> views;
  auto take = [&](const fs::path& p) {
    if (!fs::is_regular_file(p)) return;
    for (auto& v : read_table_views(p.string())) {
      auto same = std::find_if(views.begin(), views.end(), [&](const TableView& w) { return w.file == v.file; });
      if (same != views.end())
        *same = std::move(v);
      else
        views.push_back(std::move(v));
    }
  };
  take(out / "tables.json");
  for (const auto& in : inputs) take(fs::path(in) / "tables.json");
  return views;
}

std::string view_page(const TableView& v, const std::vector<Json>& selected) {
  std::string md = "# " + v.title + "\n\n";
  if (!v.note.empty()) md += v.note + "\n\n";
  md += "Selected from [" + v.records + ".jsonl](" + v.records + ".jsonl) by [tables.json](tables.json): " +
        describe_selection(v) + ".\n\n";
  md += records_table("The selected records", selected);
  md += "\n_Rebuilt by `lmscale report` from " + v.records +
        ".jsonl; do not edit by hand. Fields not shown (the model's shape, baseline details, per-step times) are "
        "in the records._\n";
  return md;
}

// The damaged lines of an output folder's records file, moved to <file>.damaged beside it (appended
// to what an earlier report moved there) before the file is rewritten without them: report never
// deletes a line. Returns the .damaged file's path.
std::string keep_damaged(const fs::path& jsonl, const std::vector<DamagedLine>& damaged) {
  const fs::path aside = jsonl.string() + ".damaged";
  std::string text = fs::exists(aside) ? read_file(aside) : "";
  if (!text.empty() && text.back() != '\n') text += "\n";
  for (const auto& d : damaged) text += d.text + "\n";
  return write_text(aside.string(), text);
}

}  // namespace

ReportSummary write_report(const ReportOptions& o) {
  if (o.inputs.empty()) throw UsageError("report needs --in: pass the --out folder of one or more benchmark runs");
  for (const auto& in : o.inputs)
    if (!fs::is_directory(in))
      throw UsageError("--in " + in + " is not a folder: pass the --out folder of a benchmark run (e.g. --in results)");
  check_output_folder(o.out, "--out");
  const fs::path out = fs::canonical(o.out);
  ReportSummary s;
  ReadStats stats;
  std::map<std::string, Merged> merged;
  std::set<std::string> rewrite;  // stems whose file loses its damaged lines (moved aside)

  // What the output folder already holds comes first, so running report twice adds nothing. A line
  // there that is not a record is moved aside, never dropped (the file is rewritten below).
  for (const auto& e : fs::directory_iterator(out)) {
    if (!e.is_regular_file() || e.is_symlink() || e.path().extension() != ".jsonl") continue;
    std::vector<DamagedLine> damaged;
    for (auto& r : read_records(e.path().string(), &stats, nullptr, &damaged)) {
      merged[e.path().stem().string()].add(std::move(r));
      ++s.kept_records;
    }
    if (damaged.empty()) continue;
    const std::string aside = keep_damaged(e.path(), damaged);
    s.moved_lines += damaged.size();
    s.damaged_files.push_back(fs::path(aside).filename().string());
    std::cerr << "report: " << damaged.size() << " damaged " << (damaged.size() == 1 ? "line" : "lines") << " of "
              << e.path().string() << " moved to " << aside << " (kept as they were; mend them and run report again)\n";
    rewrite.insert(e.path().stem().string());
  }

  for (const auto& in : o.inputs) {
    // A folder rebuilt in place (--in X --out X) has its own records, read above; the folders inside it
    // are runs of their own (docs/results/runs/...), listed by the index, never merged into it.
    std::error_code in_place;
    if (fs::equivalent(in, out, in_place)) continue;
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(in)) {
      if (e.is_symlink()) {
        // A link may point anywhere (outside the folder, at a secret): its target is never read.
        std::error_code ec;
        std::cerr << "report: skipped " << e.path().string() << ": a link (to " << fs::read_symlink(e.path(), ec).string()
                  << "); copy the file itself into the folder to merge it\n";
        continue;
      }
      if (e.is_regular_file()) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    size_t records_in = 0;
    for (const auto& p : files) {
      if (fs::equivalent(p.parent_path(), out)) continue;
      if (p.extension() == ".jsonl") {
        // Records merge by file name (they carry their own provenance): two ddp folders make one table.
        Merged& m = merged[p.stem().string()];
        size_t added = 0, read = 0;
        for (auto& r : read_records(p.string(), &stats)) {
          added += m.add(std::move(r));
          ++read;
        }
        records_in += read;
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
    std::error_code same_ec;
    if (records_in == 0 && !(fs::equivalent(in, out, same_ec) && s.kept_records > 0)) {
      std::cerr << "report: warning: --in " << in << " holds no records (no line of a .jsonl file in it is a record): "
                << "is it the --out folder of a benchmark run?\n";
      s.empty_inputs.push_back(in);
    }
  }

  for (auto& [stem, m] : merged) {
    // Rewritten whole, atomically, when records were added or older records read in today's names
    // (the plots read the files as they are, so the folder always holds today's schema).
    std::string text;
    for (const auto& r : m.records) text += r.dump() + "\n";
    const fs::path jsonl = out / (stem + ".jsonl");
    if (m.added || rewrite.count(stem) || (!m.records.empty() && read_file(jsonl) != text))
      write_text(jsonl.string(), text);
    if (m.records.empty()) continue;
    const std::string table = stem + ".md";
    write_text((out / table).string(),
               "# " + stem + "\n\n" + records_table("The records of " + stem + ".jsonl", m.records) +
                   "\n_Rebuilt by `lmscale report` from " + stem + ".jsonl; do not edit by hand. Fields not shown "
                   "(the model's shape, baseline details, per-step times) are in the records._\n");
    s.tables.push_back(table);
  }
  const std::vector<TableView> views = gather_views(out, o.inputs);
  for (const auto& v : views) {
    const std::string stem = fs::path(v.file).stem().string();
    TORCH_CHECK(!merged.count(stem) || merged.at(stem).records.empty(), "tables.json: ", v.file,
                " is the table of every record of ", stem, ".jsonl; give the selection another file name");
    std::vector<Json> selected;
    if (merged.count(v.records))
      for (const auto& r : merged.at(v.records).records)
        if (view_selects(v, r)) selected.push_back(r);
    if (selected.empty()) {
      std::cerr << "report: tables.json: " << v.file << " selects no record of " << v.records << ".jsonl (where "
                << describe_selection(v) << "); not written\n";
      s.empty_views.push_back(v.file);
      continue;
    }
    write_text((out / v.file).string(), view_page(v, selected));
    s.named_tables.push_back(v.file);
  }
  if (!views.empty()) write_text((out / "tables.json").string(), table_views_json(views));

  for (const auto& e : fs::directory_iterator(out))
    if (e.is_regular_file() && is_artifact(e.path()))
      s.files.push_back(e.path().filename().string());
  std::sort(s.files.begin(), s.files.end());
  s.skipped_lines = stats.skipped;
  s.newer_records = stats.newer;
  if (o.plots) s.plots = draw_plots(out, &s.plot_problem);
  if (!s.plot_problem.empty()) std::cerr << "report: " << s.plot_problem << "\n";

  // Everything else in the folder: pages, transcripts, logs, sub-folders (listed, never touched).
  std::set<std::string> made{"index.md", "tables.json"};
  for (const auto* list : {&s.tables, &s.named_tables, &s.plots, &s.files}) made.insert(list->begin(), list->end());
  for (const auto& e : fs::directory_iterator(out)) {
    const std::string name = e.path().filename().string();
    if (made.count(name) || e.path().extension() == ".jsonl" || name.rfind('.', 0) == 0) continue;
    s.other.push_back(e.is_directory() ? name + "/" : name);
  }
  std::sort(s.other.begin(), s.other.end());
  write_text((out / "index.md").string(), index_page(out, s, merged, views));
  std::cout << "report: " << s.kept_records << " records kept from " << out.string() << ", " << s.new_records
            << " merged from --in, " << s.moved_lines << " damaged lines moved aside"
            << (s.damaged_files.empty() ? std::string() : " (" + [&] {
                 std::string f;
                 for (const auto& d : s.damaged_files) f += (f.empty() ? "" : ", ") + d;
                 return f;
               }() + ")")
            << "; " << s.tables.size() << " tables, " << s.named_tables.size() << " named tables, " << s.plots.size()
            << " plots, index " << (out / "index.md").string() << "\n";
  if (s.newer_records)
    std::cout << "report: " << s.newer_records
              << " records of a newer schema passed through unchanged (a newer lmscale reads them fully)\n";
  if (s.skipped_lines > s.moved_lines)
    std::cerr << "report: " << s.skipped_lines - s.moved_lines
              << " damaged lines of --in folders skipped (see the warnings above; those files are left as they are)\n";
  return s;
}

}  // namespace lmscale
