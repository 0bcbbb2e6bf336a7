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

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
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

TEST(StepFlags, ProfileModeChoosesThePhases) {
  const std::string dir = testing::temp_dir("profile-mode");
  const auto r = run_cli("profile --device cpu --size tiny --context 16 --mode forward-backward --warmup 0 --steps 1 "
                         "--out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("## forward:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("## backward:"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("## optimizer:"), std::string::npos) << r.output;
  EXPECT_NE(read_file(dir + "/profile.jsonl").find("\"mode\":\"forward-backward\""), std::string::npos);
}

TEST(StepFlags, ReferenceRunsTheFp32NaiveStep) {
  const std::string dir = testing::temp_dir("reference-step");
  const auto r = run_cli("bench --device cpu --size tiny --context 8 --mode forward --warmup 0 --steps 1 --reference "
                         "--out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string records = read_file(dir + "/e2e.jsonl");
  for (const char* field : {"\"precision\":\"fp32\"", "\"attention\":\"naive\"", "\"cuda_graph\":false"})
    EXPECT_NE(records.find(field), std::string::npos) << field << "\n" << records;
}

TEST(StepFlags, MemoryTakesWarmupAndSteps) {
  const std::string dir = testing::temp_dir("memory-steps");
  const auto r = run_cli("memory --device cpu --size tiny --context 8 --precision fp32 --mode forward --warmup 2 "
                         "--steps 3 --no-snapshot --no-plot --out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string records = read_file(dir + "/memory.jsonl");
  EXPECT_NE(records.find("\"warmup\":2"), std::string::npos) << records;
  EXPECT_NE(records.find("\"steps\":3"), std::string::npos) << records;
}

}  // namespace
}  // namespace lmscale
