// The launcher fails fast: a rank that dies while its peer waits in a collective ends the whole run
// with the dead rank's exit code, long before the collective timeout.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <iostream>

#include "distributed/dist_test_util.h"

TEST(DistLaunchWorker, DISABLED_RankOneDies) {
  LMSCALE_WORKER_ONLY();
  auto g = lmscale::distributed::testing::worker_group();
  if (g.rank == 1) {
    std::cerr << "rank 1 exiting on purpose" << std::endl;
    std::_Exit(3);
  }
  std::vector<at::Tensor> t{torch::ones({4})};
  g.backend->allreduce(t)->wait();  // never completes: rank 1 is gone
}

TEST(DistLaunch, FailedRankStopsTheOthersAndReturnsItsCode) {
  auto start = std::chrono::steady_clock::now();
  auto r = lmscale::distributed::testing::run_worker("DistLaunchWorker.DISABLED_RankOneDies", 2, 120,
                                              {{"LMSCALE_DIST_TIMEOUT_S", "600"}});
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.rc, 3) << r.out << r.err;
  EXPECT_LT(seconds, 60.0) << "the surviving rank was not stopped";
  EXPECT_NE(r.err.find("[rank 1] rank 1 exiting on purpose"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1 failed first (exit code 3)"), std::string::npos) << r.err;
}

TEST(DistLaunch, AllRanksSucceedAndSeeTheirOwnEnvironment) {
  lmscale::distributed::LaunchOptions o;
  o.nproc = 3;
  std::ostringstream out, err;
  int rc = lmscale::distributed::launch_local({"/bin/sh", "-c", "echo r=$RANK w=$WORLD_SIZE l=$LOCAL_RANK"}, o, out, err);
  EXPECT_EQ(rc, 0) << err.str();
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(out.str().find("[rank " + std::to_string(r) + "] r=" + std::to_string(r) + " w=3 l=" + std::to_string(r)),
              std::string::npos)
        << out.str();
}

TEST(DistLaunch, RejectsEnvironmentWithRankButNoWorldSize) {
  setenv("RANK", "0", 1);
  unsetenv("WORLD_SIZE");
  EXPECT_THROW(lmscale::distributed::env_from_environment(), c10::Error);
  unsetenv("RANK");
  EXPECT_EQ(lmscale::distributed::env_from_environment().world_size, 1);
}
