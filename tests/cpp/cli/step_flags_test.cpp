// The step flags the README promises, on every subcommand that runs the model, and the one default
// step (Note [one default step], src/cli/step_args.h): the same help sentence everywhere, --reference
// for the assignment's settings, --mode on profile and --warmup/--steps on memory doing what they say.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "support/run_cli.h"

namespace lmscale {
namespace {

using testing::run_cli;

// Runs `lmscale <args> --out DIR` in a fresh folder; the output and what it wrote to DIR/<records>.
struct CliRun {
  testing::CliResult cli;
  std::string records;
};
CliRun run_into(const std::string& name, const std::string& args, const std::string& records) {
  const std::string dir = testing::temp_dir(name);
  CliRun r{run_cli(args + " --out " + dir), ""};
  std::ifstream f(dir + "/" + records);
  std::stringstream s;
  s << f.rdbuf();
  r.records = s.str();
  return r;
}

TEST(StepFlags, EveryModelSubcommandTakesTheSharedFlagsAndStatesTheDefaultStep) {
  for (const char* sub : {"bench", "profile", "memory", "bench ddp", "bench zero"}) {
    const auto r = run_cli(std::string(sub) + " --help");
    ASSERT_EQ(r.exit_code, 0) << sub << "\n" << r.output;
    for (const char* flag : {"--size", "--context", "--precision", "--mode", "--attention", "--batch", "--warmup",
                             "--steps", "--reference"})
      EXPECT_NE(r.output.find(flag), std::string::npos) << sub << " has no " << flag << ":\n" << r.output;
    EXPECT_NE(r.output.find("The default step (the same in bench, profile, memory"), std::string::npos)
        << sub << "\n" << r.output;
  }
}

TEST(StepFlags, DistributedBenchmarksSayWhyTheyRunTheTrainStepOnly) {
  for (const char* sub : {"bench ddp", "bench zero"}) {
    const auto r = run_cli(std::string(sub) + " --mode forward");
    EXPECT_EQ(r.exit_code, 2) << sub << "\n" << r.output;
    EXPECT_NE(r.output.find("'forward' is not a mode"), std::string::npos) << r.output;
    EXPECT_NE(run_cli(std::string(sub) + " --help").output.find("train-step only"), std::string::npos) << sub;
  }
}

// bench ddp and bench zero take their step from the shared flags as one StepSetup (to_setup): what a
// flag sets reaches the records, --reference's unfused step included, and the help states the
// distributed benchmarks' own defaults (xl, context 512) from that setup.
TEST(StepFlags, DistributedBenchmarksRunTheStepTheFlagsDescribe) {
  const struct {
    const char* sub;
    const char* impl;
    const char* records;
  } runs[] = {{"bench ddp", "single", "ddp.jsonl"}, {"bench zero", "unsharded", "zero.jsonl"}};
  for (const auto& run : runs) {
    const CliRun r = run_into(std::string("step-") + run.impl,
                              std::string("launch -n 2 -- ") + run.sub + " --backend gloo --size tiny --context 16 "
                              "--batch 2 --warmup 0 --steps 1 --reference --impl " + run.impl, run.records);
    ASSERT_EQ(r.cli.exit_code, 0) << run.sub << "\n" << r.cli.output;
    for (const char* field : {"\"size\":\"tiny\"", "\"context\":16", "\"batch\":2", "\"precision\":\"fp32\"",
                              "\"fused\":false"})
      EXPECT_NE(r.records.find(field), std::string::npos) << run.sub << ": no " << field << "\n" << r.records;
    const auto help = run_cli(std::string(run.sub) + " --help").output;
    for (const char* shown : {"custom}=xl", "--context INT=512"})
      EXPECT_NE(help.find(shown), std::string::npos) << run.sub << " --help does not show " << shown << "\n" << help;
  }
}

TEST(StepFlags, ProfileModeChoosesThePhases) {
  const CliRun r = run_into("profile-mode", "profile --device cpu --size tiny --context 16 --mode forward-backward "
                         "--warmup 0 --steps 1", "profile.jsonl");
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.output;
  EXPECT_NE(r.cli.output.find("## forward:"), std::string::npos) << r.cli.output;
  EXPECT_NE(r.cli.output.find("## backward:"), std::string::npos) << r.cli.output;
  EXPECT_EQ(r.cli.output.find("## optimizer:"), std::string::npos) << r.cli.output;
  EXPECT_NE(r.records.find("\"mode\":\"forward-backward\""), std::string::npos) << r.records;
}

TEST(StepFlags, ReferenceRunsTheFp32NaiveStep) {
  const CliRun r = run_into("reference-step", "bench --device cpu --size tiny --context 8 --mode forward --warmup 0 "
                         "--steps 1 --reference", "e2e.jsonl");
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.output;
  for (const char* field : {"\"precision\":\"fp32\"", "\"attention\":\"naive\"", "\"cuda_graph\":false"})
    EXPECT_NE(r.records.find(field), std::string::npos) << field << "\n" << r.records;
}

TEST(StepFlags, MemoryTakesWarmupAndSteps) {
  const CliRun r = run_into("memory-steps", "memory --device cpu --size tiny --context 8 --precision fp32 --mode forward "
                         "--warmup 2 --steps 3 --no-snapshot --no-plot", "memory.jsonl");
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.output;
  EXPECT_NE(r.records.find("\"warmup\":2"), std::string::npos) << r.records;
  EXPECT_NE(r.records.find("\"steps\":3"), std::string::npos) << r.records;
}

}  // namespace
}  // namespace lmscale
