// Usage errors of the `lmscale` binary (issue 20's list): each starts "lmscale: error:", exits 2
// and suggests the fix; old spellings still work with a note; help reads well.
#include <gtest/gtest.h>

#include "support/run_cli.h"

namespace lmscale {
namespace {

using testing::run_cli;

struct UsageCase {
  std::string args, must_mention;
};
void PrintTo(const UsageCase& c, std::ostream* os) { *os << "'" << c.args << "'"; }

class CliUsageError : public ::testing::TestWithParam<UsageCase> {};

TEST_P(CliUsageError, SaysErrorExitsTwoAndSuggests) {
  const auto r = run_cli(GetParam().args);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output.rfind("lmscale: error: ", 0), 0u) << r.output;
  EXPECT_NE(r.output.find(GetParam().must_mention), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Exception raised from"), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CliUsageError,
    ::testing::Values(UsageCase{"bench --contxt 128", "did you mean --context?"},
                      UsageCase{"benhc", "did you mean `lmscale bench`?"},
                      UsageCase{"bench atention", "did you mean `lmscale bench attention`?"},
                      UsageCase{"", "needs a subcommand"},
                      UsageCase{"memory --size smal", "did you mean 'small'?"},
                      UsageCase{"bench --precision bf61", "did you mean 'bf16'?"},
                      UsageCase{"profile --context 128,256", "takes one value"},
                      UsageCase{"bench --steps 0", "must be at least 1"},
                      UsageCase{"account --d-model 1.5", "--d-model"},
                      UsageCase{"launch -n 2 bench comm --backend gloo",
                                "put `--` before the program's arguments: lmscale launch -n 2 -- bench comm"},
                      UsageCase{"bench --size custom --d-model 64 --device cpu", "needs --d-ff, --layers, --heads"},
                      // Issue 29, row 11: the flag named, the allowed form, exit 2 everywhere.
                      UsageCase{"bench --context ''", "--context"},
                      UsageCase{"bench --context abc", "not a whole number >= 1"},
                      UsageCase{"bench --device nosuch", "cpu, cuda or cuda:N"},
                      UsageCase{"bench ddp --check-consistency -1", "--check-consistency"},
                      UsageCase{"bench zero --check-consistency -1", "--check-consistency"},
                      UsageCase{"train --fp8-min-dim -1", "--fp8-min-dim: must be at least 0"},
                      UsageCase{"report --in /nonexistent-lmscale-folder", "--in /nonexistent-lmscale-folder is not a folder"},
                      // Row 2: an empty --out would land in the filesystem's root.
                      UsageCase{"bench --device cpu --size tiny --out ''", "--out '' is empty"}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

// Settings in the environment are usage errors too (issue 29, rows 5 and 10): refused at start, exit 2,
// the variable named with the allowed form, and no suggestion that is itself refused.
TEST(CliUsage, BadEnvironmentSettingsAreRefusedAtStart) {
  auto r = run_cli("bench --device cpu --size tiny --steps 1 --warmup 0 --out /nonexistent-lmscale/x",
                   "LMSCALE_INJECT_FAULT=nonsense");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("<fault>@<size>"), std::string::npos) << r.output;
  r = run_cli("bench --device cpu --size tiny --steps 1 --warmup 0", "LMSCALE_INJECT_FAULT=oom@nosuchsize");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("'nosuchsize' is not a model size"), std::string::npos) << r.output;
  r = run_cli("info", "LMSCALE_INJECT_OOM=tiny:abc");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = run_cli("launch -n 2 -- bench ddp --backend gloo --size tiny --context 16 --steps 1 --warmup 0 --impl single",
              "LMSCALE_DIST_TIMEOUT_S=abc");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("LMSCALE_DIST_TIMEOUT_S=abc is not a whole number in [1, 86400]"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("LMSCALE_DIST_TIMEOUT_S=0"), std::string::npos) << "suggests a value it refuses: " << r.output;
  EXPECT_EQ(r.output.find("RANK/WORLD_SIZE"), std::string::npos) << "an unrelated hint: " << r.output;
}

TEST(CliUsage, LaunchAcceptsTorchrunsNprocPerNode) {
  const auto r = run_cli("launch --nproc-per-node 2 -- info");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("GPUs visible"), std::string::npos) << r.output;
}

TEST(CliUsage, OldSpellingsStillWorkWithOneNoteEach) {
  const std::string dir = testing::temp_dir("old-spellings");
  const auto r = run_cli("memory --device cpu --size tiny --contexts 8 16 --precisions fp32 --modes forward "
                         "--no-snapshot --no-plot --out " + dir);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* note : {"--contexts is deprecated: write --context", "--precisions is deprecated",
                           "--modes is deprecated", "space-separated lists are deprecated: write --context 8,16"})
    EXPECT_NE(r.output.find(note), std::string::npos) << note << "\n" << r.output;
  // Progress lines with the elapsed time (and, from the second cell on, an ETA): "[1/2 0:00] tiny ...".
  EXPECT_NE(r.output.find("[1/2 0:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("] tiny context 8 fp32 forward ..."), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ETA"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("] tiny context 16 fp32 forward ..."), std::string::npos) << r.output;
}

// CLI11 collects every occurrence of a list flag; a value named twice is measured once.
TEST(CliUsage, RepeatedListValuesAreMeasuredOnce) {
  const std::string dir = testing::temp_dir("repeated-list");
  const auto r = run_cli("bench --device cpu --size tiny --context 8 --mode forward --mode forward,forward-backward "
                         "--warmup 0 --steps 1 --out " + dir);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("sweep: 2 cells"), std::string::npos) << r.output;  // not 3: forward once
}

TEST(CliUsage, HelpShowsTheProgramNameIntegersAndAnExample) {
  const auto account = run_cli("account --help");
  EXPECT_EQ(account.exit_code, 0);
  EXPECT_NE(account.output.find("Usage: lmscale account"), std::string::npos) << account.output;
  EXPECT_NE(account.output.find("--d-model INT"), std::string::npos) << account.output;
  EXPECT_EQ(account.output.find("--blocks FLOAT"), std::string::npos) << account.output;
  const auto memory = run_cli("memory --help");
  EXPECT_EQ(memory.output.find("{false}"), std::string::npos) << memory.output;
  EXPECT_EQ(memory.output.find("{true}"), std::string::npos) << memory.output;
  for (const char* sub : {"bench", "profile", "memory", "account", "info", "launch", "lab autocast", "bench ddp",
                          "bench zero", "bench comm", "bench attention"}) {
    const auto r = run_cli(std::string(sub) + " --help");
    EXPECT_EQ(r.exit_code, 0) << sub;
    EXPECT_NE(r.output.find("Example"), std::string::npos) << sub << " has no example:\n" << r.output;
    EXPECT_EQ(r.output.find("/lmscale "), std::string::npos) << "a path in the usage line:\n" << r.output;
  }
}

TEST(CliUsage, InfoNamesWhatTheBuildHolds) {
  const auto r = run_cli("info");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* line : {"lmscale 0.", "commit", "compiler:", "CUDA toolkit:", "kernels:", "GPUs visible:",
                           "distributed backends: gloo", "Python extension lmscale._C:", "baseline interpreter:"})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
}

}  // namespace
}  // namespace lmscale
