// The launcher fails fast: a rank that dies while its peer waits in a collective ends the whole run
// with the dead rank's exit code, long before the collective timeout.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <thread>

#include "core/error.h"
#include "distributed/dist_test_util.h"

TEST(DistLaunchWorker, DISABLED_RankOneDies) {
  LMSCALE_WORKER_GROUP(g);
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

// Ranks sharing a machine get one OpenMP thread each (torchrun's rule) unless the user chose.
TEST(DistLaunch, SetsOmpNumThreadsToOneUnlessSet) {
  const char* saved = std::getenv("OMP_NUM_THREADS");
  const std::string keep = saved ? saved : "";
  unsetenv("OMP_NUM_THREADS");
  lmscale::distributed::LaunchOptions o;
  o.nproc = 2;
  std::ostringstream out, err;
  int rc = lmscale::distributed::launch_local({"/bin/sh", "-c", "echo omp=$OMP_NUM_THREADS"}, o, out, err);
  EXPECT_EQ(rc, 0) << err.str();
  EXPECT_NE(out.str().find("[rank 1] omp=1"), std::string::npos) << out.str();
  EXPECT_NE(err.str().find("OMP_NUM_THREADS=1 in each of the 2 ranks"), std::string::npos) << err.str();
  setenv("OMP_NUM_THREADS", "3", 1);
  std::ostringstream out2, err2;
  rc = lmscale::distributed::launch_local({"/bin/sh", "-c", "echo omp=$OMP_NUM_THREADS"}, o, out2, err2);
  EXPECT_EQ(rc, 0) << err2.str();
  EXPECT_NE(out2.str().find("[rank 0] omp=3"), std::string::npos) << out2.str();
  EXPECT_EQ(err2.str().find("OMP_NUM_THREADS=1"), std::string::npos) << err2.str();
  if (saved) setenv("OMP_NUM_THREADS", keep.c_str(), 1); else unsetenv("OMP_NUM_THREADS");
}

TEST(DistLaunchWorker, DISABLED_TwoNodesFormOneWorld) {
  LMSCALE_WORKER_ONLY();
  auto env = lmscale::distributed::env_from_environment();
  const int node = std::stoi(std::getenv("GROUP_RANK"));
  EXPECT_EQ(env.rank, node * env.local_world_size + env.local_rank);
  auto g = lmscale::distributed::testing::worker_group();
  std::vector<at::Tensor> t{torch::full({1}, double(g.rank + 1))};
  g.backend->allreduce(t)->wait();
  EXPECT_EQ(t[0].item<double>(), g.world_size * (g.world_size + 1) / 2.0);
  std::cout << "world " << g.world_size << " rank " << g.rank << " node " << node << " ok" << std::endl;
}

// Two launchers on loopback, as two machines would run them: 2 nodes x 2 ranks = one world of 4.
TEST(DistLaunch, TwoLaunchersOnLoopbackFormOneWorld) {
  using namespace lmscale::distributed;
  const int port = pick_free_port();
  std::string outs[2], errs[2];
  int rcs[2] = {-1, -1};
  auto node = [&](int n) {
    LaunchOptions o;
    o.nproc = 2;
    o.nnodes = 2;
    o.node_rank = n;
    o.master_port = port;
    o.timeout_seconds = 120;
    o.extra_env = {{"LMSCALE_TEST_SEED", "1"}, {"LMSCALE_DIST_TIMEOUT_S", "60"}, {"OMP_NUM_THREADS", "1"}};
    std::ostringstream out, err;
    rcs[n] = launch_local({lmscale::distributed::testing::self_path(), "--gtest_filter=DistLaunchWorker.DISABLED_TwoNodesFormOneWorld",
                           "--gtest_also_run_disabled_tests"},
                          o, out, err);
    outs[n] = out.str();
    errs[n] = err.str();
  };
  std::thread second(node, 1);
  node(0);
  second.join();
  for (int n = 0; n < 2; ++n) {
    EXPECT_EQ(rcs[n], 0) << "node " << n << "\n" << outs[n] << errs[n];
    for (int local = 0; local < 2; ++local) {
      const int rank = 2 * n + local;
      EXPECT_NE(outs[n].find("[rank " + std::to_string(rank) + "] world 4 rank " + std::to_string(rank) + " node " +
                             std::to_string(n) + " ok"),
                std::string::npos)
          << outs[n] << errs[n];
    }
  }
}

TEST(DistLaunch, SeveralNodesNeedAnExplicitPort) {
  lmscale::distributed::LaunchOptions o;
  o.nnodes = 2;
  EXPECT_THROW(lmscale::distributed::check_launch_options(o), lmscale::UsageError);
  o.master_port = 29500;
  o.node_rank = 2;
  EXPECT_THROW(lmscale::distributed::check_launch_options(o), lmscale::UsageError);
  o.node_rank = 1;
  EXPECT_NO_THROW(lmscale::distributed::check_launch_options(o));
}

// The store bound to the address the ranks use: a loopback MASTER_ADDR gives a loopback-only socket.
TEST(DistStore, ListenSocketIsBoundToTheMasterAddress) {
  std::string why;
  const int fd = lmscale::distributed::store_listen_socket("127.0.0.1", 0, why);
  ASSERT_GE(fd, 0) << why;
  sockaddr_in sa{};
  socklen_t len = sizeof(sa);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  EXPECT_EQ(ntohl(sa.sin_addr.s_addr), INADDR_LOOPBACK);
  close(fd);
  EXPECT_LT(lmscale::distributed::store_listen_socket("192.0.2.1", 0, why), 0);  // TEST-NET-1: not ours
  EXPECT_NE(why.find("192.0.2.1"), std::string::npos) << why;
}

// Under torchrun's agent store every rank (rank 0 too) is a client: no second server on the port.
TEST(DistStore, AgentStoreMakesRankZeroAClient) {
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  setenv("TORCHELASTIC_RESTART_COUNT", "3", 1);
  auto env = lmscale::distributed::env_from_environment();
  for (const char* v : {"RANK", "WORLD_SIZE", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT"}) unsetenv(v);
  EXPECT_TRUE(env.use_agent_store);
  EXPECT_EQ(env.restart_count, 3);
  // The agent's server; our rank 0 must connect to it rather than start its own on the same port.
  c10d::TCPStoreOptions server_opts;
  server_opts.port = 0;
  server_opts.isServer = true;
  server_opts.waitWorkers = false;
  c10d::TCPStore agent("127.0.0.1", server_opts);
  env.master_port = agent.getPort();
  auto store = lmscale::distributed::connect_store(env, std::chrono::seconds(10));
  store->set("k", std::vector<uint8_t>{'v'});
  auto seen = agent.get("/worker/attempt_3/k");
  EXPECT_EQ(std::string(seen.begin(), seen.end()), "v");
}

// `bench ddp|zero|comm` alone would time nothing: the error says how to start several processes.
TEST(DistLaunch, SingleProcessBenchSaysHowToStartSeveral) {
  lmscale::distributed::DistEnv alone;
  try {
    lmscale::distributed::require_several_ranks(alone, "bench ddp");
    ADD_FAILURE() << "a world of one was accepted";
  } catch (const c10::Error& e) {
    const std::string msg = e.what_without_backtrace();
    EXPECT_NE(msg.find("lmscale launch -n 2 -- bench ddp"), std::string::npos) << msg;
    EXPECT_NE(msg.find("torchrun --nproc-per-node 2 --no-python lmscale bench ddp"), std::string::npos) << msg;
  }
  lmscale::distributed::DistEnv two;
  two.world_size = 2;
  EXPECT_NO_THROW(lmscale::distributed::require_several_ranks(two, "bench ddp"));
}
