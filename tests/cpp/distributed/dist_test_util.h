// Helpers for multi-process tests: a driver test re-runs this test binary as N ranks (through
// distributed::launch_local) with a gtest filter selecting one DISABLED_ worker test, which ctest itself
// never runs; the worker reads its rank from the environment and builds a Gloo group.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <utility>

#include "distributed/launcher.h"
#include "distributed/process_group.h"

namespace lmscale::distributed::testing {

struct RankRun {
  int rc = -1;
  std::string out, err;
};

inline std::string self_path() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Runs worker test `suite.DISABLED_name` as `nproc` ranks; a fresh random seed is shared by all
// ranks through LMSCALE_TEST_SEED so inputs differ between runs but agree across ranks.
inline RankRun run_worker(const std::string& worker_filter, int nproc, double timeout_seconds = 120,
                          std::map<std::string, std::string> env = {}) {
  LaunchOptions o;
  o.nproc = nproc;
  o.timeout_seconds = timeout_seconds;
  o.extra_env = std::move(env);
  o.extra_env.emplace("LMSCALE_TEST_SEED", std::to_string(std::random_device{}() % 100000));
  o.extra_env.emplace("LMSCALE_DIST_TIMEOUT_S", "60");
  o.extra_env.emplace("OMP_NUM_THREADS", "1");
  std::ostringstream out, err;
  RankRun r;
  r.rc = launch_local({self_path(), "--gtest_filter=" + worker_filter, "--gtest_also_run_disabled_tests"}, o, out,
                      err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// A driver test's whole body: runs the worker as `nproc` ranks and expects every rank to pass,
// printing what the ranks wrote otherwise. Returns the run for further checks.
inline RankRun expect_workers_pass(const std::string& worker_filter, int nproc, double timeout_seconds = 120,
                                   std::map<std::string, std::string> env = {}) {
  RankRun r = run_worker(worker_filter, nproc, timeout_seconds, std::move(env));
  EXPECT_EQ(r.rc, 0) << worker_filter << " on " << nproc << " ranks\n" << r.out << r.err;
  return r;
}

// The GPU variant of a driver test: two ranks over NCCL, one GPU each (skip first with
// LMSCALE_NEEDS_TWO_GPUS()).
inline RankRun expect_workers_pass_on_nccl(const std::string& worker_filter) {
  return expect_workers_pass(worker_filter, 2, 120, {{"LMSCALE_TEST_BACKEND", "nccl"}});
}

// True inside a rank started by run_worker; worker tests skip themselves otherwise.
inline bool in_worker() { return std::getenv("LMSCALE_TEST_SEED") != nullptr && std::getenv("RANK") != nullptr; }

inline uint64_t test_seed() { return std::stoull(std::getenv("LMSCALE_TEST_SEED")); }

// Gloo unless the driver set LMSCALE_TEST_BACKEND=nccl (the GPU variants of the tests).
inline Group worker_group() {
  DistEnv env = env_from_environment();
  auto timeout = collective_timeout_from_env();
  auto store = connect_store(env, timeout);
  const char* b = std::getenv("LMSCALE_TEST_BACKEND");
  return make_group(parse_backend(b ? b : "gloo"), store, env, timeout);
}

// Skips a driver test that needs two GPUs on machines with fewer.
#define LMSCALE_NEEDS_TWO_GPUS()                                              \
  do {                                                                        \
    if (torch::cuda::device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";      \
  } while (0)

}  // namespace lmscale::distributed::testing

// Worker bodies return early (pass) outside a launched rank, e.g. when run by hand with
// --gtest_also_run_disabled_tests.
#define LMSCALE_WORKER_ONLY()                                        \
  do {                                                               \
    if (!::lmscale::distributed::testing::in_worker()) GTEST_SKIP(); \
    at::set_num_threads(1);                                          \
  } while (0)

// A worker body's first line: LMSCALE_WORKER_ONLY(), then `name`, this rank's group (Gloo, or NCCL
// when the driver asked for it).
#define LMSCALE_WORKER_GROUP(name) \
  LMSCALE_WORKER_ONLY();           \
  ::lmscale::distributed::Group name = ::lmscale::distributed::testing::worker_group()
