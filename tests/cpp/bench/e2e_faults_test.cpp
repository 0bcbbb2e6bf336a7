// Every failing cell of a sweep is recorded and the sweep goes on (issue: nothing lost): a CPU
// out-of-memory (the CPU allocator's own error, from a real impossible allocation), a baseline
// interpreter that dies with exit code 3, a CUDA-graph capture error and a kernel error that reach
// the sweep (injected: CPU CI has no GPU) — each becomes a record with its status and reason, the
// other cells are measured, and the exit status is non-zero exactly when a cell failed other than
// by running out of memory. Runs on CPU without torch in Python (the "interpreter" is a script).
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>
#include <map>

#include "results/reader.h"
#include "support/run_cli.h"

namespace lmscale {
using testing::run_cli;
using testing::temp_dir;

namespace {

const char* kTiny = "bench --device cpu --size tiny --batch 2 --warmup 1 --steps 2 ";

// An executable that stands in for the Python interpreter: says why on stderr and exits 3.
std::string dying_interpreter(const std::string& dir) {
  const std::string path = dir + "/python-that-dies";
  std::ofstream(path) << "#!/bin/sh\necho 'ModuleNotFoundError: No module named torch' >&2\nexit 3\n";
  chmod(path.c_str(), 0755);
  return path;
}

struct Cell {
  std::string status, reason;
  bool measured = false;  // has a step_ms record
};

// impl/context → what e2e.jsonl says about that cell.
std::map<std::string, Cell> cells(const std::string& dir) {
  std::map<std::string, Cell> out;
  for (const auto& j : read_jsonl(dir + "/e2e.jsonl")) {
    Cell& c = out[j["impl"].get<std::string>() + "/" + std::to_string(j["context"].get<int64_t>())];
    c.status = j["status"];
    if (j.contains("reason")) c.reason = j["reason"];
    c.measured |= j["metric"] == "step_ms";
  }
  return out;
}

}  // namespace

TEST(SweepFaults, CpuOomAndADeadBaselineInOneRunAreRecordedAndTheRestMeasured) {
  const std::string dir = temp_dir("faults");
  const std::string python = dying_interpreter(dir);
  auto r = run_cli(std::string(kTiny) + "--context 16,32 --compare torch-eager --out " + dir + "/out",
                   "LMSCALE_INJECT_OOM=tiny:16 LMSCALE_PYTHON=" + python);
  EXPECT_EQ(r.exit_code, 1) << r.output;  // the dead baseline is a failure; the OOM alone would not be
  EXPECT_NE(r.output.find("2 of 4 cells failed"), std::string::npos) << r.output;
  auto c = cells(dir + "/out");
  EXPECT_EQ(c["lmscale/16"].status, "oom");
  EXPECT_NE(c["lmscale/16"].reason.find("can't allocate memory"), std::string::npos) << c["lmscale/16"].reason;
  EXPECT_EQ(c["lmscale/32"].status, "ok");
  EXPECT_TRUE(c["lmscale/32"].measured);
  for (const char* ctx : {"16", "32"}) {
    const Cell& eager = c[std::string("torch-eager/") + ctx];
    EXPECT_EQ(eager.status, "error");
    EXPECT_NE(eager.reason.find("exited with code 3"), std::string::npos) << eager.reason;  // not a wait status
    EXPECT_NE(eager.reason.find("No module named torch"), std::string::npos) << eager.reason;
    EXPECT_NE(eager.reason.find("LMSCALE_PYTHON"), std::string::npos) << eager.reason;  // the fix
  }
  std::ifstream md(dir + "/out/e2e.md");
  const std::string table((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(table.find("## Cells without numbers"), std::string::npos) << table;
  EXPECT_NE(table.find("exited with code 3"), std::string::npos) << table;
}

TEST(SweepFaults, MissingInterpreterNamesTheFix) {
  const std::string dir = temp_dir("nopython");
  auto r = run_cli(std::string(kTiny) + "--context 16 --compare torch-eager --out " + dir,
                   "LMSCALE_PYTHON=/nonexistent/python");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const Cell eager = cells(dir)["torch-eager/16"];
  EXPECT_EQ(eager.status, "error");
  EXPECT_NE(eager.reason.find("could not start '/nonexistent/python'"), std::string::npos) << eager.reason;
  EXPECT_NE(eager.reason.find("set LMSCALE_PYTHON"), std::string::npos) << eager.reason;
  EXPECT_TRUE(cells(dir)["lmscale/16"].measured);
}

TEST(SweepFaults, CaptureAndKernelErrorsAreRecordedAndTheSweepGoesOn) {
  const std::string dir = temp_dir("capture");
  auto r = run_cli(std::string(kTiny) + "--context 16,24,32 --out " + dir,
                   "LMSCALE_INJECT_FAULT=capture@tiny:16,error@tiny:24");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  auto c = cells(dir);
  EXPECT_EQ(c["lmscale/16"].status, "capture-failed");
  EXPECT_NE(c["lmscale/16"].reason.find("stream is capturing"), std::string::npos) << c["lmscale/16"].reason;
  EXPECT_EQ(c["lmscale/24"].status, "error");
  EXPECT_NE(c["lmscale/24"].reason.find("launch failure"), std::string::npos) << c["lmscale/24"].reason;
  EXPECT_EQ(c["lmscale/24"].reason.find('\n'), std::string::npos);  // one line, no backtrace
  EXPECT_TRUE(c["lmscale/32"].measured);  // the config after them still ran
}

// Issue 29, rows 5 and 6: an injected fault is recorded as injected (the record's injected_fault, and
// the variable in its command), and the status comes from the fault, not from words in a message.
TEST(SweepFaults, InjectedFaultsAreRecordedAsInjected) {
  const std::string dir = temp_dir("injected");
  auto r = run_cli(std::string(kTiny) + "--context 16,24 --out " + dir, "LMSCALE_INJECT_OOM=tiny:16");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const auto& j : read_jsonl(dir + "/e2e.jsonl")) {
    const bool injected = j["context"] == 16;
    EXPECT_EQ(j.value("injected_fault", ""), injected ? "oom" : "") << j.dump();
    EXPECT_EQ(j["command"].get<std::string>().rfind("LMSCALE_INJECT_OOM=tiny:16 lmscale bench", 0), 0u) << j.dump();
    EXPECT_EQ(j["status"], injected ? "oom" : "ok") << j.dump();
  }
}

TEST(SweepFaults, OutOfMemoryAloneExitsZero) {
  const std::string dir = temp_dir("oom-only");
  auto r = run_cli(std::string(kTiny) + "--context 16,32 --out " + dir, "LMSCALE_INJECT_FAULT=oom@tiny:16");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(cells(dir)["lmscale/16"].status, "oom");
}

}  // namespace lmscale
