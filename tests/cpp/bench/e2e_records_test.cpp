// What a sweep's records and page may claim (issue 29, rows 7, 8, 12 and 17): every invocation has
// its own run id; two sweeps writing to one folder at once leave one page with both runs' rows; a CPU
// run's page says nothing of CUDA graphs; a cell cut between two of its record writes is measured
// again on --resume; cells too noisy or too short to trust are flagged with the command to measure
// them properly, and records carry the CPU's thread count and load.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "results/reader.h"
#include "support/run_cli.h"

namespace lmscale {
namespace {

using testing::read_text;
using testing::run_cli;
using testing::temp_dir;

const std::string kTiny = "bench --device cpu --size tiny --batch 2 --warmup 0 --steps 2 ";

std::set<std::string> run_ids(const std::string& jsonl) {
  std::set<std::string> ids;
  for (const auto& j : read_jsonl(jsonl)) ids.insert(j.value("run", ""));
  return ids;
}

}  // namespace

TEST(SweepRecords, TwoSweepsAtOnceLeaveOnePageWithBothRuns) {
  const std::string out = temp_dir("concurrent-sweeps") + "/out";
  // Both start in the same second: only the run id tells them apart.
  const std::string second = " & '" LMSCALE_CLI_PATH "' " + kTiny + "--context 24,32 --out " + out + "; wait";
  const auto r = run_cli(kTiny + "--context 16,40 --out " + out + second);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto ids = run_ids(out + "/e2e.jsonl");
  ASSERT_EQ(ids.size(), 2u) << "expected two distinct run ids";
  const std::string page = read_text(out + "/e2e.md");
  for (const auto& id : ids) EXPECT_NE(page.find(id), std::string::npos) << id << " missing from\n" << page;
  for (const char* context : {"16", "24", "32", "40"})
    EXPECT_NE(page.find(std::string("| ") + context + " "), std::string::npos) << "context " << context << ":\n" << page;
}

TEST(SweepRecords, ACpuPageSaysOnlyWhatTheRecordsSayAndFlagsNoise) {
  const std::string out = temp_dir("cpu-page");
  const auto r = run_cli(kTiny + "--context 16 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string page = read_text(out + "/e2e.md");
  EXPECT_EQ(page.find("CUDA graph"), std::string::npos) << page;
  // Two timed steps are too few to trust: flagged, with the command that measures it properly.
  EXPECT_NE(page.find("Cells not to be trusted"), std::string::npos) << page;
  EXPECT_NE(page.find("2 timed steps"), std::string::npos) << page;
  EXPECT_NE(page.find("--steps 20`"), std::string::npos) << page;
  for (const auto& j : read_jsonl(out + "/e2e.jsonl")) {
    EXPECT_TRUE(j.contains("cpu_threads") && j["cpu_threads"].get<int>() >= 1) << j.dump();
    EXPECT_TRUE(j.contains("load") && j["load"].is_number()) << j.dump();
  }
}

TEST(SweepRecords, ACellCutBetweenItsRecordWritesIsMeasuredAgainOnResume) {
  const std::string out = temp_dir("cut-cell");
  const std::string cmd = kTiny + "--context 16,24 --out " + out;
  ASSERT_EQ(run_cli(cmd).exit_code, 0);
  // An older lmscale wrote a cell's records one write() each: keep context 24's first records only.
  std::string kept;
  for (const auto& j : read_jsonl(out + "/e2e.jsonl"))
    if (j["context"] == 16 || (j["metric"] != "tokens_per_s" && j["metric"] != "all_step_ms")) kept += j.dump() + "\n";
  std::ofstream(out + "/e2e.jsonl") << kept;
  const auto r = run_cli(cmd + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resume: 1 of 2 results already in"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 incomplete"), std::string::npos) << r.output;
  size_t tokens = 0;
  for (const auto& j : read_jsonl(out + "/e2e.jsonl")) tokens += j["context"] == 24 && j["metric"] == "tokens_per_s";
  EXPECT_EQ(tokens, 1u);  // measured again, whole
  // `report` marks the cut cell of the old run incomplete rather than showing tokens/s 0.
  const auto rep = run_cli("report --in " + out + " --out " + out + "/report --no-plots");
  ASSERT_EQ(rep.exit_code, 0) << rep.output;
  EXPECT_NE(read_text(out + "/report/e2e.md").find("1 incomplete cell"), std::string::npos) << read_text(out + "/report/e2e.md");
}

}  // namespace lmscale
