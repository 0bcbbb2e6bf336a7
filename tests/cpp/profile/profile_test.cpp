// Kernel profile: the aggregation counts self time without double counting, attributes kernels
// to attention parts through correlation ids, and a real Kineto run of a tiny CPU model yields
// three phases with ops, shares that sum to at most 100%, attention parts, and a Perfetto trace.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "profile/profile_run.h"
#include "profile/profile_summary.h"

namespace lmscale {
namespace {

TraceOp cpu(const std::string& name, uint64_t start, uint64_t end, bool user = false, uint64_t corr = 0) {
  TraceOp t;
  t.name = name;
  t.start_ns = start;
  t.end_ns = end;
  t.thread = 1;
  t.user_scope = user;
  t.correlation = corr;
  return t;
}

TraceOp gpu(const std::string& name, uint64_t start, uint64_t end, uint64_t linked) {
  TraceOp t;
  t.name = name;
  t.on_device = true;
  t.start_ns = start;
  t.end_ns = end;
  t.linked_correlation = linked;
  return t;
}

TEST(ProfileSummary, CpuSelfTimeDoesNotDoubleCount) {
  std::mt19937 rng(std::random_device{}());
  const uint64_t mm = 1000 + rng() % 1000;  // ns of the inner op
  // forward [0,10000) > attention/scores [100,5000) > aten::matmul [200,4000) > aten::mm [300,300+mm)
  std::vector<TraceOp> ev = {cpu("forward", 0, 10000, true), cpu("attention/scores", 100, 5000, true),
                             cpu("aten::matmul", 200, 4000), cpu("aten::mm", 300, 300 + mm),
                             cpu("aten::softmax", 6000, 7000)};
  auto p = summarize_phase("forward", ev, 1, /*device_time=*/false);
  ASSERT_EQ(p.ops.size(), 3u);  // user scopes are not ops
  double sum_share = 0, sum_ms = 0;
  for (const auto& s : p.ops) sum_share += s.share, sum_ms += s.ms_per_step;
  EXPECT_NEAR(sum_share, 1.0, 1e-12);
  EXPECT_NEAR(p.total_ms_per_step, (3800.0 + 1000.0) / 1e6, 1e-12);  // matmul 3800 total = self + mm
  EXPECT_NEAR(sum_ms, p.total_ms_per_step, 1e-12);
  for (const auto& s : p.ops) {
    if (s.name == "aten::matmul") {
      EXPECT_NEAR(s.ms_per_step, (3800.0 - mm) / 1e6, 1e-12);  // braces: EXPECT_* expands to an if/else
    }
  }
  ASSERT_EQ(p.attention.size(), 1u);
  EXPECT_EQ(p.attention[0].name, "scores");
  EXPECT_NEAR(p.attention[0].ms_per_step, 3800.0 / 1e6, 1e-12);
}

TEST(ProfileSummary, DeviceKernelsFollowTheirLaunchingOp) {
  std::vector<TraceOp> ev = {cpu("attention/scores", 0, 100, true), cpu("aten::mm", 10, 20, false, 7),
                             cpu("attention/softmax", 100, 200, true), cpu("aten::softmax", 110, 120, false, 8),
                             gpu("sgemm_kernel", 1000, 1600, 7), gpu("softmax_kernel", 1600, 1800, 8),
                             gpu("sgemm_kernel", 2000, 2600, 99), gpu("forward", 900, 3000, 0)};
  ev.back().user_scope = true;  // a GPU-side annotation of a user range: not a kernel
  auto p = summarize_phase("forward", ev, 2, /*device_time=*/true);
  ASSERT_EQ(p.ops.size(), 2u);
  EXPECT_EQ(p.ops[0].name, "sgemm_kernel");
  EXPECT_DOUBLE_EQ(p.ops[0].calls_per_step, 1.0);  // 2 calls over 2 steps
  EXPECT_NEAR(p.ops[0].share, 1200.0 / 1400.0, 1e-12);
  ASSERT_EQ(p.attention.size(), 2u);
  EXPECT_NEAR(p.attention[0].ms_per_step, 600.0 / 1e6 / 2, 1e-15);  // only the linked gemm
  EXPECT_NEAR(p.attention[1].ms_per_step, 200.0 / 1e6 / 2, 1e-15);
  EXPECT_THROW(summarize_phase("forward", ev, 0, true), c10::Error);
}

TEST(ProfileSummary, ShortensLongKernelNames) {
  EXPECT_EQ(short_kernel_name("aten::mm"), "aten::mm");
  const std::string longname(200, 'k');
  EXPECT_EQ(short_kernel_name(longname, 10), std::string(10, 'k') + "…");
}

TEST(ProfileRun, TinyCpuModelHasThreePhasesAndATrace) {
  ProfileOptions o;
  o.setup.model = model_config("tiny");
  o.setup.context = 16;
  o.setup.batch = 2;
  o.setup.seed = std::random_device{}();
  o.warmup = 1;
  o.steps = 1;
  const auto trace = std::filesystem::temp_directory_path() / ("lmscale_trace_" + std::to_string(o.setup.seed) + ".json");
  o.trace_path = trace.string();
  ProfileReport r = run_profile(o);
  ASSERT_EQ(r.phases.size(), 3u);
  const char* names[] = {"forward", "backward", "optimizer"};
  for (size_t i = 0; i < 3; ++i) {
    const auto& ph = r.phases[i];
    EXPECT_EQ(ph.phase, names[i]);
    EXPECT_FALSE(ph.device_time);
    ASSERT_FALSE(ph.ops.empty()) << ph.phase;
    EXPECT_GT(ph.total_ms_per_step, 0.0);
    double share = 0;
    for (const auto& s : ph.ops) share += s.share;
    EXPECT_LE(share, 1.0 + 1e-9) << ph.phase;
    EXPECT_GT(share, 0.99) << ph.phase;  // every op is listed
  }
  // Forward runs the naive attention: its three ranges show up with time in them.
  const auto& att = r.phases[0].attention;
  ASSERT_EQ(att.size(), 3u);
  EXPECT_EQ(att[0].name, "scores");
  EXPECT_EQ(att[1].name, "softmax");
  EXPECT_EQ(att[2].name, "value");
  for (const auto& a : att) EXPECT_GT(a.ms_per_step, 0.0) << a.name;
  bool fused_adamw = false;
  for (const auto& s : r.phases[2].ops) fused_adamw |= s.name.find("adamw") != std::string::npos;
  EXPECT_TRUE(fused_adamw);
  ASSERT_TRUE(std::filesystem::exists(trace));
  std::ifstream f(trace);
  auto j = nlohmann::json::parse(f);
  EXPECT_FALSE(j["traceEvents"].empty());
  std::remove(trace.c_str());  // not std::filesystem (see lab_test.cpp)
}

}  // namespace
}  // namespace lmscale
