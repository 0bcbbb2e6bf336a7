// The noise guard of `lmscale bench` in `bench attention` and `profile` too: every time carries its
// spread, a cell over too few timed steps (or too wide a spread) is flagged with the command that
// measures it properly, and a CPU run's header does not claim CUDA-event timings.
#include <gtest/gtest.h>

#include "results/reader.h"
#include "support/run_cli.h"
#include "support/temp_dirs.h"

namespace lmscale {
namespace {

using testing::read_text;
using testing::run_cli_argv;

TEST(NoiseGuard, AttentionOnTheCpuSaysHowItTimedAndFlagsTwoSteps) {
  const std::string out = testing::temp_dir("attention-noise");
  const auto r = run_cli_argv({"bench", "attention", "--device", "cpu", "--context", "32", "--head-dim", "16",
                               "--precision", "fp32", "--impl", "torch-naive", "--warmup", "1", "--iters", "2", "--out",
                               out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string md = read_text(out + "/attention.md");
  EXPECT_EQ(md.find("CUDA-event"), std::string::npos) << md;
  EXPECT_NE(md.find("host-clock timings on the CPU"), std::string::npos) << md;
  EXPECT_NE(md.find(" ± "), std::string::npos) << md;
  EXPECT_NE(md.find("not to be trusted** (2 timed steps"), std::string::npos) << md;
  EXPECT_NE(md.find("--iters 20"), std::string::npos) << md;
  int timed = 0;
  for (const auto& rec : read_jsonl(out + "/attention.jsonl"))
    if (rec.value("unit", "") == "ms") {
      ++timed;
      EXPECT_TRUE(rec.contains("std") && rec.value("n", 0) == 2) << rec.dump();
    }
  EXPECT_EQ(timed, 3);  // fwd, bwd, fwd+bwd
}

TEST(NoiseGuard, ProfileFlagsTooFewSteps) {
  const std::string out = testing::temp_dir("profile-noise");
  const auto r = run_cli_argv({"profile", "--device", "cpu", "--size", "tiny", "--context", "16", "--batch", "1",
                               "--warmup", "1", "--steps", "2", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string md = read_text(out + "/profile.md");
  EXPECT_NE(md.find("Not to be trusted** (forward: 2 timed steps"), std::string::npos) << md;
  EXPECT_NE(md.find("--steps 20"), std::string::npos) << md;
  EXPECT_NE(md.find(" ± "), std::string::npos) << md;
  bool spread = false;
  for (const auto& rec : read_jsonl(out + "/profile.jsonl")) spread |= rec.contains("wall_std_ms");
  EXPECT_TRUE(spread);
}

}  // namespace
}  // namespace lmscale
