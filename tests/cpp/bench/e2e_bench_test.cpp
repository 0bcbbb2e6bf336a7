// `lmscale bench` end to end on a tiny CPU config: exit code, the table, the JSON Lines records,
// the injected out-of-memory path, and bad input failing fast with a message that names the fix.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "results/reader.h"
#include "support/run_cli.h"

namespace lmscale {
using testing::run_cli;
using testing::temp_dir;

namespace {
const char* kTiny = "bench --device cpu --size tiny --context 32 --batch 2 --warmup 1 --steps 2 ";
}

TEST(BenchCli, TinyCpuRunWritesRecordsAndTable) {
  auto dir = temp_dir("bench");
  auto r = run_cli(std::string(kTiny) + "--mode forward,train-step --out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("| tiny"), std::string::npos) << r.output;
  auto recs = read_jsonl(dir + "/e2e.jsonl");
  std::set<std::string> metrics;
  for (const auto& j : recs) {
    for (const char* key : {"bench", "impl", "size", "context", "batch", "precision", "mode", "metric", "value",
                            "unit", "gpu", "commit", "date", "command"})
      EXPECT_TRUE(j.contains(key)) << "missing " << key << " in " << j.dump();
    EXPECT_EQ(j["bench"], "e2e");
    EXPECT_EQ(j["status"], "ok");
    metrics.insert(j["mode"].get<std::string>() + "/" + j["metric"].get<std::string>());
    if (j["unit"] == "ms" && j["value"].is_number()) { EXPECT_GT(j["value"].get<double>(), 0.0); }
  }
  for (const char* m : {"forward/forward_ms", "forward/step_ms", "train-step/forward_ms", "train-step/backward_ms",
                        "train-step/optimizer_ms", "train-step/step_ms", "train-step/tokens_per_s"})
    EXPECT_TRUE(metrics.count(m)) << "missing metric " << m;
  EXPECT_FALSE(metrics.count("forward/backward_ms"));
  std::ifstream md(dir + "/e2e.md");
  EXPECT_TRUE(md.good());
}

TEST(BenchCli, OutOfMemoryBecomesACellAndTheSweepGoesOn) {
  auto dir = temp_dir("oom");
  auto r = run_cli(std::string(kTiny) + "--context 16,32 --out " + dir, "LMSCALE_INJECT_OOM=tiny:16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OOM"), std::string::npos) << r.output;
  auto recs = read_jsonl(dir + "/e2e.jsonl");
  int oom = 0, ok = 0;
  for (const auto& j : recs) (j["status"] == "oom" ? oom : ok)++;
  EXPECT_EQ(oom, 1);  // one status record for the failed config
  EXPECT_GT(ok, 0);   // the context-32 config still ran
}

TEST(BenchCli, WarmupStudyRunsFourVariants) {
  auto dir = temp_dir("warmup");
  auto r = run_cli(std::string(kTiny) + "--warmup-study --out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::set<int> warmups;
  for (const auto& j : read_jsonl(dir + "/e2e_warmup.jsonl")) warmups.insert(j["warmup"].get<int>());
  EXPECT_EQ(warmups, (std::set<int>{0, 1, 2, 5}));
}

struct BadInput {
  std::string args, env, must_mention;
};

// Test names and failure messages show the command line, not the struct's bytes.
void PrintTo(const BadInput& b, std::ostream* os) { *os << "'" << b.args << "'"; }

class BenchCliBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(BenchCliBadInput, FailsWithMessageNamingTheFix) {
  auto r = run_cli(GetParam().args + " --out " + temp_dir("bad"), GetParam().env);
  EXPECT_EQ(r.exit_code, 2) << "a refused request is a usage error, checked before any measurement: " << r.output;
  EXPECT_NE(r.output.find(GetParam().must_mention), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Exception raised from"), std::string::npos) << "backtrace leaked: " << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BenchCliBadInput,
    ::testing::Values(BadInput{"bench --device cpu --size enormous", "", "is not a size"},
                      BadInput{"bench --device cpu --size tiny --steps 0", "", "--steps: must be at least 1"},
                      BadInput{"bench --device cpu --size tiny --context 64 --model-context 32", "",
                               "--model-context"},
                      BadInput{"bench --device cpu --size tiny --precision fp16", "", "use fp32 or bf16"},
                      BadInput{"bench --device cpu --size tiny --precision fp8", "", "needs an NVIDIA Hopper GPU"},
                      BadInput{"bench --device cpu --size tiny --precision int8", "", "not a precision"},
                      BadInput{"bench --device cpu --size tiny --attention magic", "", "naive"},
                      BadInput{"bench --device cpu --size tiny --compare jax", "", "torch-eager"},
                      BadInput{"bench --device cpu --size custom --d-model 64", "", "--size custom: needs"},
                      BadInput{"bench --device cpu --size tiny --cuda-graph", "", "--cuda-graph"}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

}  // namespace lmscale
