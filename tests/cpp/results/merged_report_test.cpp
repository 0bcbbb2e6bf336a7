// `lmscale report`: tables rebuilt from merged records (two folders of one bench make one table;
// a table in a run folder is never copied), an index, damaged input skipped with file:line, and
// paths with quotes, spaces, $() and ; reaching the plot subprocesses as plain arguments.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "core/python_module.h"
#include "results/reader.h"
#include "results/table.h"
#include "support/run_cli.h"

namespace lmscale {
namespace {

using testing::run_cli_argv;
using testing::read_text;
using testing::temp_dir;

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

void write_file(const std::string& path, const std::string& text) {
  ::mkdir(path.substr(0, path.rfind('/')).c_str(), 0755);
  std::ofstream(path) << text;
}

// A ddp record as a run on `gpu` would write it.
std::string ddp_line(const std::string& gpu, const std::string& impl, double ms) {
  Json j = Record("ddp", impl).update(Json{{"size", "tiny"}, {"precision", "fp32"}, {"world", 2}}).metric("step_ms", ms, "ms");
  j["gpu"] = gpu;
  return j.dump() + "\n";
}

// Whether the interpreter the binary will start can draw (matplotlib) and find lmscale.plots.
bool can_plot() {
  const auto r = run_process(python_module_command("lmscale.plots", {"--help"}).argv,
                             [] {
                               ProcessOptions o;
                               o.capture_stdout = true;
                               o.merge_stderr = true;
                               o.env = python_module_command("lmscale.plots", {}).env;
                               return o;
                             }());
  return r.ok();
}

TEST(RecordsTable, OneRowPerCellConstantsOnceFailuresWithReasons) {
  std::vector<Json> records;
  Record a("attention", "flash");
  a.update(Json{{"context", 128}, {"precision", "bf16"}});
  records.push_back(a.metric("fwd_ms", 1.5, "ms"));
  records.push_back(a.metric("bwd_ms", 3.0, "ms"));
  Record b("attention", "flash");
  b.update(Json{{"context", 256}, {"precision", "bf16"}}).set_status(Status::oom, "out of memory");
  records.push_back(b.metric("fwd_ms", nullptr, "ms"));
  Record loss("ddp", "lmscale-bucketed");
  loss.update(Json{{"context", 512}, {"precision", "bf16"}});
  records.push_back(loss.metric("loss", 3.818424, "nats"));  // one value, no spread: six significant digits
  const std::string md = records_table("attention", records);
  EXPECT_NE(md.find("| 3.81842 "), std::string::npos) << md;
  EXPECT_NE(md.find("Every row:"), std::string::npos) << md;
  EXPECT_NE(md.find("precision bf16"), std::string::npos) << md;
  EXPECT_NE(md.find("| 128 "), std::string::npos) << md;
  EXPECT_NE(md.find("| oom "), std::string::npos) << md;
  EXPECT_NE(md.find("out of memory"), std::string::npos) << md;
  EXPECT_NE(md.find("fwd_ms (ms)"), std::string::npos) << md;
  EXPECT_NE(md.find("commit"), std::string::npos) << md;  // provenance of the run
}

TEST(Report, RebuildsTablesFromMergedRecordsOfTwoFolders) {
  const std::string root = temp_dir("report");
  write_file(root + "/run1/ddp.jsonl", ddp_line("GPU-A", "lmscale-naive", 10) + ddp_line("GPU-A", "lmscale-bucketed", 7));
  write_file(root + "/run1/ddp.md", "COPIED TABLE FROM RUN 1\n");
  write_file(root + "/run2/ddp.jsonl", ddp_line("GPU-B", "lmscale-naive", 11));
  write_file(root + "/run2/ddp.md", "COPIED TABLE FROM RUN 2\n");
  // An old (version 1) attention record and a line cut by a full disk.
  write_file(root + "/run2/attention.jsonl",
             R"({"bench":"attention","impl":"torch-naive","seq":64,"dtype":"fp32","metric":"fwd_ms","value":0.5,"unit":"ms","gpu":"cpu","commit":"abc","date":"2026-11-01T00:00:00Z","command":"lmscale bench attention"})"
             "\n"
             R"({"attention":"naive","batch":4,"bench)");
  write_file(root + "/run2/garbage.jsonl", "\x01\x02 not json\n");
  write_file(root + "/run2/empty.jsonl", "");
  const std::string out = root + "/out";
  auto r = run_cli_argv({"report", "--in", root + "/run1", "--in", root + "/run2", "--out", out, "--no-plots"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ddp = read_text(out + "/ddp.md");
  EXPECT_EQ(ddp.find("COPIED"), std::string::npos) << "a run's table was copied:\n" << ddp;
  EXPECT_NE(ddp.find("GPU-A"), std::string::npos) << ddp;
  EXPECT_NE(ddp.find("GPU-B"), std::string::npos) << ddp;
  EXPECT_NE(ddp.find("lmscale-bucketed"), std::string::npos) << ddp;
  EXPECT_EQ(read_jsonl(out + "/ddp.jsonl").size(), 3u);
  // The old record is merged in today's names; the cut line and the garbage are skipped by name.
  const auto attention = read_jsonl(out + "/attention.jsonl");
  ASSERT_EQ(attention.size(), 1u);
  EXPECT_EQ(attention[0]["context"], 64);
  EXPECT_EQ(attention[0]["precision"], "fp32");
  EXPECT_NE(r.output.find(root + "/run2/attention.jsonl:2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(root + "/run2/garbage.jsonl:1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 damaged lines of --in folders skipped"), std::string::npos) << r.output;
  const std::string index = read_text(out + "/index.md");
  EXPECT_NE(index.find("(ddp.md)"), std::string::npos) << index;
  EXPECT_NE(index.find("(attention.md)"), std::string::npos) << index;

  // Running it again adds nothing.
  r = run_cli_argv({"report", "--in", root + "/run1", "--in", root + "/run2", "--out", out, "--no-plots"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(", 0 merged from --in"), std::string::npos) << r.output;
  EXPECT_EQ(read_jsonl(out + "/ddp.jsonl").size(), 3u);
}

// Issue 29, rows 1, 9 and 13: report never deletes. A damaged line of the output folder (two records
// glued together, a merge-conflict block) is moved to <file>.damaged, named, and the summary counts
// what was kept, moved and merged; an --in folder with no records is warned about; a link in an --in
// folder is never followed; a binary .jsonl gives a handful of warnings and a count, not thousands.
TEST(Report, NeverDeletesALineAndSaysWhatItDid) {
  const std::string root = temp_dir("report-keep");
  const std::string out = root + "/out";
  std::string records;
  for (int i = 0; i < 10; ++i) records += ddp_line("GPU-A", "lmscale-" + std::to_string(i), 10 + i);
  const std::string glued = ddp_line("GPU-A", "lmscale-g1", 1);
  const std::string damaged = glued.substr(0, glued.size() - 1) + ddp_line("GPU-A", "lmscale-g2", 2);
  const std::string conflict = "<<<<<<< HEAD\n";
  write_file(out + "/ddp.jsonl", records.substr(0, records.size() / 2) + damaged + conflict + records.substr(records.size() / 2));
  write_file(root + "/run1/ddp.jsonl", ddp_line("GPU-B", "lmscale-new", 5));
  write_file(root + "/norecords/notes.txt", "no records here\n");
  write_file(root + "/secret/key.json", "{\"secret\": 42}\n");
  ::symlink((root + "/secret/key.json").c_str(), (root + "/run1/.hidden.json").c_str());
  ::symlink((root + "/secret/key.json").c_str(), (root + "/run1/link.jsonl").c_str());
  std::string binary;
  for (int i = 0; i < 4000; ++i) binary += std::string("\x7f\x45\x4c\x46\x02\x01") + char('a' + i % 26) + "\n";
  write_file(root + "/binary/blob.jsonl", binary);

  auto r = run_cli_argv({"report", "--in", root + "/run1", "--in", root + "/norecords", "--in", root + "/binary",
                         "--out", out, "--no-plots"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The damaged lines are kept, beside the file, and named; none is lost.
  EXPECT_NE(r.output.find("2 damaged lines of " + out + "/ddp.jsonl moved to " + out + "/ddp.jsonl.damaged"),
            std::string::npos) << r.output;
  EXPECT_EQ(read_text(out + "/ddp.jsonl.damaged"), damaged + conflict);
  EXPECT_EQ(read_jsonl(out + "/ddp.jsonl").size(), 11u);  // 10 kept + 1 merged
  EXPECT_NE(r.output.find("10 records kept from"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 merged from --in, 2 damaged lines moved aside"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--in " + root + "/norecords holds no records"), std::string::npos) << r.output;
  // Links are skipped, their targets never read or copied.
  EXPECT_NE(r.output.find("skipped " + root + "/run1/.hidden.json: a link"), std::string::npos) << r.output;
  EXPECT_FALSE(exists(out + "/.hidden.json"));
  EXPECT_EQ(read_text(out + "/ddp.jsonl").find("secret"), std::string::npos);
  // The binary file: a few warnings and a count.
  size_t warnings = 0;
  for (size_t at = 0; (at = r.output.find("blob.jsonl:", at)) != std::string::npos; ++at)
    warnings += std::isdigit(static_cast<unsigned char>(r.output[at + 11])) != 0;  // file:line warnings only
  EXPECT_EQ(warnings, kWarningsPerFile) << r.output;
  EXPECT_NE(r.output.find("more damaged lines not listed (4000 in all, and no record"), std::string::npos) << r.output;
  // The index names the .damaged file for what it is.
  EXPECT_NE(read_text(out + "/index.md").find("ddp.jsonl.damaged"), std::string::npos);
}

// tables.json names tables that select records (one GPU, one run); report rebuilds them, says which
// selected nothing, and the index marks every page it did not make as not rebuilt from records.
TEST(Report, NamedTablesAreSelectionsAndTheIndexMarksPagesWithoutRecords) {
  const std::string root = temp_dir("report-views");
  write_file(root + "/run1/ddp.jsonl", ddp_line("GPU-A", "lmscale-naive", 10) + ddp_line("GPU-A", "lmscale-bucketed", 7));
  write_file(root + "/run2/ddp.jsonl", ddp_line("GPU-B", "lmscale-naive", 11));
  write_file(root + "/run2/tables.json", R"({"tables": [
      {"file": "ddp_gpu_b.md", "title": "GPU B alone", "records": "ddp", "where": {"gpu": "GPU-B"}, "note": "One run."},
      {"file": "ddp_two.md", "title": "Either GPU, naive", "records": "ddp",
       "where": {"gpu": ["GPU-A", "GPU-B"], "impl": "lmscale-naive"}},
      {"file": "nothing.md", "title": "No such GPU", "records": "ddp", "where": {"gpu": "GPU-C"}}]})");
  const std::string out = root + "/out";
  write_file(out + "/README.md", "# hand-written\n");
  write_file(out + "/cli_transcript.md", "# transcript\n");
  write_file(out + "/check.log", "log\n");
  write_file(out + "/sub/x.md", "x\n");
  const auto r = run_cli_argv({"report", "--in", root + "/run1", "--in", root + "/run2", "--out", out, "--no-plots"});
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const std::string b = read_text(out + "/ddp_gpu_b.md");
  EXPECT_NE(b.find("# GPU B alone"), std::string::npos) << b;
  EXPECT_NE(b.find("One run."), std::string::npos) << b;
  EXPECT_NE(b.find("GPU-B"), std::string::npos) << b;
  EXPECT_EQ(b.find("GPU-A"), std::string::npos) << "a record another GPU measured was selected:\n" << b;
  EXPECT_NE(b.find("1 records"), std::string::npos) << b;
  const std::string two = read_text(out + "/ddp_two.md");
  EXPECT_NE(two.find("2 records"), std::string::npos) << two;
  EXPECT_EQ(two.find("lmscale-bucketed"), std::string::npos) << two;
  EXPECT_FALSE(exists(out + "/nothing.md"));
  EXPECT_NE(r.output.find("nothing.md selects no record of ddp.jsonl"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 named tables"), std::string::npos) << r.output;
  // The definitions travel with the tables, so the output folder rebuilds them alone.
  EXPECT_NE(read_text(out + "/tables.json").find("ddp_gpu_b.md"), std::string::npos);

  const std::string index = read_text(out + "/index.md");
  for (const char* want : {"(ddp.md)", "(ddp_gpu_b.md)", "(ddp_two.md)", "nothing.md", "selects no record",
                           "[README.md](README.md) — page written by hand", "[cli_transcript.md](cli_transcript.md) — transcript",
                           "[check.log](check.log) — log", "[sub/](sub/) — a folder"})
    EXPECT_NE(index.find(want), std::string::npos) << want << " missing from:\n" << index;
  EXPECT_EQ(index.find("(tables.json) —"), std::string::npos) << index;
  EXPECT_EQ(read_text(out + "/README.md"), "# hand-written\n");  // listed, never touched

  // Run again from the output folder alone: the same tables.
  const auto again = run_cli_argv({"report", "--in", out, "--out", out, "--no-plots"});
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find(", 0 merged from --in"), std::string::npos) << again.output;
  EXPECT_EQ(read_text(out + "/ddp_gpu_b.md"), b);
}

// Plots read the files as they are: report leaves the folder's records in today's names even when it
// adds none (a folder of version-1 records, reported in place).
TEST(Report, RecordsOfTheOutputFolderAreRewrittenInTodaysNames) {
  const std::string out = temp_dir("report-in-place") + "/results";
  write_file(out + "/attention.jsonl",
             R"({"bench":"attention","impl":"torch-naive","seq":64,"dtype":"fp32","metric":"fwd_ms","value":0.5,"unit":"ms","gpu":"cpu","commit":"abc","date":"2026-11-01T00:00:00Z","command":"lmscale bench attention"})"
             "\n");
  const auto r = run_cli_argv({"report", "--in", out, "--out", out, "--no-plots"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(", 0 merged from --in"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("holds no records"), std::string::npos) << r.output;  // its records are the output's
  const auto records = read_jsonl(out + "/attention.jsonl");
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0]["context"], 64);
  EXPECT_EQ(records[0]["precision"], "fp32");
  EXPECT_FALSE(records[0].contains("seq")) << records[0].dump();
}

TEST(Report, ABadTablesJsonIsNamedWithItsFix) {
  const std::string root = temp_dir("report-bad-views");
  write_file(root + "/run/ddp.jsonl", ddp_line("GPU-A", "lmscale-naive", 10));
  const std::vector<std::pair<std::string, std::string>> cases{
      {"{\"tables\": [", "is not valid JSON"},
      {R"({"tables": [{"file": "x.md", "title": "t", "records": "ddp"}]})", "\"where\" must be an object"},
      {R"({"tables": [{"file": "../x.md", "title": "t", "records": "ddp", "where": {"gpu": "A"}}]})", "must be a file name"},
      {R"({"tables": [{"file": "ddp.md", "title": "t", "records": "ddp", "where": {"gpu": "A"}}]})",
       "give the selection another file name"}};
  for (const auto& [json, message] : cases) {
    write_file(root + "/run/tables.json", json);
    const auto r = run_cli_argv({"report", "--in", root + "/run", "--out", root + "/out", "--no-plots"});
    EXPECT_NE(r.exit_code, 0) << json;
    EXPECT_NE(r.output.find("tables.json"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << message << " not in:\n" << r.output;
  }
}

TEST(Report, PathsAreNeverReadByAShell) {
  const std::string root = temp_dir("inject");
  write_file(root + "/run/comm.jsonl",
             [] {
               std::string s;
               for (double mb : {1.0, 4.0})
                 for (const char* m : {"algbw", "busbw"})
                   s += Record("comm", "lmscale-c10d-gloo")
                            .update(Json{{"backend", "gloo"}, {"op", "all_reduce"}, {"world", 2},
                                         {"size_bytes", mb * (1 << 20)}})
                            .metric(m, mb, "GB/s")
                            .dump() +
                        "\n";
               return s;
             }());
  const bool plots = can_plot();
  for (const std::string& out : {root + "/x';touch " + root + "/PWNED;'", root + "/a b $(touch " + root + "/PWNED2) ; c`touch " + root + "/PWNED3`"}) {
    auto r = run_cli_argv({"report", "--in", root + "/run", "--out", out});
    // Plots asked for and not drawn: everything else written, exit 1 with the fix.
    ASSERT_EQ(r.exit_code, plots ? 0 : 1) << r.output;
    EXPECT_TRUE(exists(out + "/index.md")) << r.output;
    EXPECT_TRUE(exists(out + "/comm.md")) << r.output;
    if (plots) EXPECT_TRUE(exists(out + "/comm.png")) << r.output;
    else EXPECT_NE(r.output.find("run it later"), std::string::npos) << r.output;
  }
  for (const char* f : {"/PWNED", "/PWNED2", "/PWNED3"}) EXPECT_FALSE(exists(root + f)) << "a shell ran " << f;
}

// `lmscale memory` draws its timeline through the same call (memory snapshots need a GPU, so the
// call is tested here with the paths a user could give --out).
TEST(Report, MemoryPlotPathsAreNeverReadByAShell) {
  const std::string dir = temp_dir("inject-mem") + "/q'uote $(touch PWNED); `touch PWNED2` x";
  ::mkdir(dir.c_str(), 0755);
  const std::string timeline = dir + "/memory_tiny_timeline.json";
  std::ofstream(timeline) << R"({"event_index":[0,1,2],"active_bytes":[0,1024,512],"peak":{"event":1,"bytes":1024},
                                 "phases":[{"phase":"forward","first":0,"last":2}],
                                 "config":{"size":"tiny","context":16,"batch":1,"precision":"fp32","mode":"forward",
                                           "gpu":"cpu","commit":"abc","date":"2026-11-23T00:00:00Z"}})";
  const std::string png = dir + "/memory_tiny_timeline.png";
  const std::string problem = run_python_module("lmscale.plots", {"memory", timeline, png}, {}, "matplotlib");
  if (can_plot())
    EXPECT_TRUE(problem.empty() && exists(png)) << problem;
  else
    EXPECT_NE(problem.find("run it later"), std::string::npos) << problem;
  EXPECT_FALSE(exists("PWNED") || exists(dir + "/PWNED") || exists("PWNED2"));
}

// docs/results: runs in folders of their own below the results folder. Rebuilding that folder in place
// merges none of their records into it, and its index lists every folder that has a README.md with
// the page's first line (tests/house/check_results_index.py holds the committed index to that).
TEST(Report, InPlaceMergesNoSubFolderAndTheIndexListsEveryFolderWithItsFirstLine) {
  const std::string out = temp_dir("report-folders") + "/results";
  write_file(out + "/README.md", "# Measured results\n");
  write_file(out + "/e2e/README.md", "# The training step\n\nCurrent numbers.\n");
  ::mkdir((out + "/runs").c_str(), 0755);
  write_file(out + "/runs/2026-11-26-abc1234-ddp/README.md", "# DDP on two GPUs, 2026-11-26\n");
  write_file(out + "/runs/2026-11-26-abc1234-ddp/ddp.jsonl", ddp_line("GPU-A", "lmscale-naive", 10));
  write_file(out + "/runs/2026-11-26-abc1234-ddp/call1/README.md", "# The first call\n");
  write_file(out + "/runs/2026-11-26-abc1234-ddp/call1/x.log", "log\n");
  const auto r = run_cli_argv({"report", "--in", out, "--out", out, "--no-plots"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(exists(out + "/ddp.jsonl")) << "a run's records were merged into the folder above it";
  EXPECT_FALSE(exists(out + "/ddp.md"));
  const std::string index = read_text(out + "/index.md");
  for (const char* want : {"- [e2e/](e2e/README.md) — The training step\n",
                           "- [runs/2026-11-26-abc1234-ddp/](runs/2026-11-26-abc1234-ddp/README.md) — DDP on two GPUs, 2026-11-26\n",
                           "- [runs/2026-11-26-abc1234-ddp/call1/](runs/2026-11-26-abc1234-ddp/call1/README.md) — The first call\n"})
    EXPECT_NE(index.find(want), std::string::npos) << want << " missing from:\n" << index;
  EXPECT_EQ(index.find("[runs/](runs/README.md)"), std::string::npos) << "a folder without README.md listed:\n" << index;

  // The run folder itself, reported in place, keeps its own records and tables.
  const std::string run = out + "/runs/2026-11-26-abc1234-ddp";
  const auto again = run_cli_argv({"report", "--in", run, "--out", run, "--no-plots"});
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(read_text(run + "/ddp.md").find("lmscale-naive"), std::string::npos);
  EXPECT_NE(read_text(run + "/index.md").find("- [call1/](call1/README.md) — The first call"), std::string::npos);
}

}  // namespace
}  // namespace lmscale
