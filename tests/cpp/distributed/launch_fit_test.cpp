// `lmscale launch` checks the request against the machine before any rank starts (issue 29, row 3):
// ranks against cores and each rank's estimated memory against what is free, refusing what cannot
// fit with the numbers and the override flag; a mild oversubscription is only a warning.
#include <gtest/gtest.h>

#include "distributed/launch_fit.h"
#include "support/run_cli.h"

namespace lmscale::distributed {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(LaunchFit, SixtyFourCpuRanksOnTwoCoresAndTwentyThreeGiBAreRefusedWithTheNumbers) {
  const Machine laptop{2, 23 * kGiB, 0, 0};
  const FitVerdict v = check_launch_fit({64, 0, false}, laptop);
  ASSERT_FALSE(v.refusal.empty());
  EXPECT_NE(v.refusal.find("64 ranks need about 25.0 GiB of host memory"), std::string::npos) << v.refusal;
  EXPECT_NE(v.refusal.find("23.0 GiB is available"), std::string::npos) << v.refusal;
  EXPECT_NE(v.refusal.find("64 ranks on 2 cores"), std::string::npos) << v.refusal;
  EXPECT_NE(v.refusal.find(kOversubscribeFlag), std::string::npos) << v.refusal;
  EXPECT_NE(v.refusal.find("Use -n 2 or fewer"), std::string::npos) << v.refusal;
}

TEST(LaunchFit, WhatFitsPassesAndMildOversubscriptionWarns) {
  const Machine m{2, 23 * kGiB, 0, 0};
  EXPECT_EQ(check_launch_fit({2, 0, false}, m).refusal, "");
  EXPECT_EQ(check_launch_fit({2, 0, false}, m).warning, "");
  const FitVerdict four = check_launch_fit({4, 0, false}, m);
  EXPECT_EQ(four.refusal, "");
  EXPECT_NE(four.warning.find("4 ranks on 2 cores"), std::string::npos) << four.warning;
}

TEST(LaunchFit, ModelStateCountsPerRankAndGpusShareTheirMemory) {
  // A 2.7B model: 16 bytes per parameter is ~40 GiB of state per CPU rank.
  const int64_t params = int64_t{2700} * 1000 * 1000;
  EXPECT_FALSE(check_launch_fit({2, params, false}, Machine{64, 64 * kGiB, 0, 0}).refusal.empty());
  // On GPUs the state is on the GPU: 4 ranks on 2 GPUs of 80 GiB put two 2.7B ranks on one.
  const FitVerdict shared = check_launch_fit({4, params, true}, Machine{64, 512 * kGiB, 2, 80 * kGiB});
  EXPECT_NE(shared.refusal.find("2 ranks per GPU need about"), std::string::npos) << shared.refusal;
  EXPECT_EQ(check_launch_fit({2, params, true}, Machine{64, 512 * kGiB, 2, 80 * kGiB}).refusal, "");
}

TEST(LaunchFit, TheCliRefusesBeforeAnyRankStartsAndTheFlagOverrides) {
  // 1024 ranks of the 2.7B model fit no machine's host memory.
  auto r = testing::run_cli("launch -n 1024 -- bench ddp --size 2.7B --backend gloo");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("lmscale: error: launch: -n 1024 does not fit this machine"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[rank "), std::string::npos) << "a rank started:\n" << r.output;
  r = testing::run_cli("launch -n 2 --oversubscribe -- info");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace lmscale::distributed
