// The designs of distributed/data_parallel.h through the CLI, two CPU ranks over Gloo: `bench ddp` runs
// every one on the default step (the cross-rank check of the weights the forward reads passes for each
// multi-rank design), and `bench zero` measures the distributed optimizer's layouts: AdamW state 1/N for
// zero1 and zero2, and zero2 holding fewer gradient bytes between steps than zero1. Two launchers of two
// ranks each (`launch --nnodes 2`, rendezvous on loopback, as two machines would) train the distributed
// optimizer to the same losses as one launcher of four.
#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "distributed/launcher.h"
#include "results/reader.h"
#include "support/run_cli.h"

namespace lmscale {
namespace {

using testing::run_cli;
using testing::temp_dir;

const std::string kTiny = "--backend gloo --size tiny --context 16 --batch 2 --precision fp32 --warmup 1 --steps 2 ";

// value of `metric` per impl in <file>
std::map<std::string, double> by_impl(const std::string& file, const std::string& metric) {
  std::map<std::string, double> v;
  for (const auto& j : read_jsonl(file))
    if (j.value("metric", "") == metric) v[j.value("impl", "")] = j.value("value", -1.0);
  return v;
}

TEST(DataParallelDesigns, BenchDdpRunsEveryDesignOnTheStepAndRanksAgree) {
  const std::string out = temp_dir("ddp-designs");
  const auto r = run_cli("launch -n 2 -- bench ddp " + kTiny +
                             "--impl single,bucketed,zero1,zero2 --bucket-mb 1 --comm-dtype fp32 --check-consistency 1 "
                             "--out " + out,
                         "OMP_NUM_THREADS=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto step = by_impl(out + "/ddp.jsonl", "step_ms");
  for (const char* impl : {"lmscale-single", "lmscale-bucketed", "lmscale-zero1", "lmscale-zero2"})
    EXPECT_GT(step.count(impl) ? step.at(impl) : -1, 0) << impl << "\n" << r.output;
  for (const auto& j : read_jsonl(out + "/ddp.jsonl")) {
    if (j.value("impl", "") != "lmscale-single" && j.contains("consistency_checks")) {
      EXPECT_EQ(j.value("consistency_checks", -1), 3) << j.dump();
    }
  }
  const auto state = by_impl(out + "/ddp.jsonl", "optimizer_state_bytes");
  EXPECT_LT(state.at("lmscale-zero1"), 0.6 * state.at("lmscale-bucketed")) << r.output;
  // The step column's spread and the noise guard (2 timed steps are too few to trust), with how it was timed.
  EXPECT_NE(r.output.find("host clock on the CPU"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not to be trusted** (2 timed steps"), std::string::npos) << r.output;
  for (const auto& j : read_jsonl(out + "/ddp.jsonl"))
    if (j.value("metric", "") == "step_ms") EXPECT_EQ(j.value("n", -1), 2) << j.dump();
}

TEST(DataParallelDesigns, BenchZeroShardsStateAndZero2ShardsGradients) {
  const std::string out = temp_dir("zero-designs");
  const auto r = run_cli("launch -n 2 -- bench zero " + kTiny + "--impl unsharded,zero1,zero2 --bucket-mb 0.25 "
                             "--check-consistency 1 --out " + out,
                         "OMP_NUM_THREADS=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto state = by_impl(out + "/zero.jsonl", "optimizer_state_bytes");
  const auto grads = by_impl(out + "/zero.jsonl", "grad_bytes");
  ASSERT_EQ(state.size(), 3u) << r.output;
  EXPECT_LT(state.at("lmscale-zero1"), 0.6 * state.at("lmscale-unsharded"));
  EXPECT_LT(state.at("lmscale-zero2"), 0.6 * state.at("lmscale-unsharded"));
  EXPECT_LT(grads.at("lmscale-zero2"), grads.at("lmscale-zero1"));
  // The CPU has no allocator statistics: the table says n/a, and no record claims 0 bytes allocated.
  EXPECT_NE(r.output.find("| n/a"), std::string::npos) << r.output;
  EXPECT_TRUE(by_impl(out + "/zero.jsonl", "peak_allocated").empty());
  EXPECT_NE(r.output.find("host clock on the CPU"), std::string::npos) << r.output;
}

// (step, loss) of every loss record in <file>, in order.
std::vector<std::pair<int, double>> losses(const std::string& file) {
  std::vector<std::pair<int, double>> v;
  for (const auto& j : read_jsonl(file))
    if (j.value("metric", "") == "loss") v.emplace_back(j.value("step", -1), j.value("value", -1.0));
  return v;
}

TEST(DataParallelDesigns, TwoLaunchersTrainAsOneLauncherOfFour) {
  const std::string curve = "bench ddp " + kTiny + "--impl zero1 --bucket-mb 1 --loss-every 1 --out ";
  const std::string one = temp_dir("one-launcher");
  const auto r = run_cli("launch -n 4 -- " + curve + one, "OMP_NUM_THREADS=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string two = temp_dir("two-launchers");
  const int port = distributed::pick_free_port("127.0.0.1");
  testing::CliResult nodes[2];
  auto node = [&](int n) {
    nodes[n] = run_cli("launch --nnodes 2 --node-rank " + std::to_string(n) + " -n 2 --master-addr 127.0.0.1 " +
                           "--master-port " + std::to_string(port) + " -- " + curve + two,
                       "OMP_NUM_THREADS=1");
  };
  std::thread second(node, 1);
  node(0);
  second.join();
  for (int n = 0; n < 2; ++n) ASSERT_EQ(nodes[n].exit_code, 0) << "node " << n << "\n" << nodes[n].output;
  const auto a = losses(one + "/ddp.jsonl"), b = losses(two + "/ddp.jsonl");
  ASSERT_FALSE(a.empty()) << r.output;
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second, b[i].second) << "step " << a[i].first;  // the same ranks, data and collectives
  }
}

}  // namespace
}  // namespace lmscale
