// The sweep on a tiny CPU config through the CLI: `lmscale bench --compare` runs one Python process
// per baseline and size (`python -m lmscale.baseline.e2e`), size by size, records per config, the
// side-by-side table, an injected out-of-memory config that becomes a cell while the batch goes on,
// --resume, and the mark on ratios across invocations. torch.compile is not run here: Inductor's CPU
// code generation takes minutes on the 2-core CI machine (tests/python/test_baseline_e2e.py has an
// opt-in test). The failure paths (a dead baseline, capture and kernel errors) are e2e_faults_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <thread>

#include "core/process.h"
#include "core/python_module.h"
#include "results/reader.h"
#include "support/run_cli.h"

namespace lmscale {
using testing::run_cli;
using testing::temp_dir;

namespace {

const char* kTiny = "bench --device cpu --size tiny --batch 2 --warmup 1 --steps 2 ";

// The markdown a sweep wrote into dir.
std::string sweep_table(const std::string& dir) {
  std::ifstream f(dir + "/e2e.md");
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

bool python_has_torch() {
  static const bool has = [] {
    ProcessOptions quiet;
    quiet.capture_stdout = quiet.merge_stderr = true;
    return run_process({python_interpreter(), "-c", "import torch"}, quiet).ok();
  }();
  return has;
}

#define SKIP_WITHOUT_TORCH() \
  if (!python_has_torch())   \
  GTEST_SKIP() << python_interpreter() << " cannot import torch (./lmscale test sets LMSCALE_PYTHON)"

}  // namespace

TEST(BenchCompare, EagerBaselineRunsAsOneProcessWithRecordsAndRatios) {
  SKIP_WITHOUT_TORCH();
  auto dir = temp_dir("compare");
  auto r = run_cli(std::string(kTiny) + "--context 16,32 --mode forward,train-step --compare torch-eager --out " + dir,
                   "LMSCALE_INJECT_OOM=tiny:16");
  ASSERT_EQ(r.exit_code, 0) << r.output;  // out of memory is a result, not a failure
  EXPECT_NE(r.output.find("torch-eager: one Python process for tiny's 4 configs"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[8/8 "), std::string::npos) << r.output;  // a progress line per config and impl
  // Records: per impl and config; the injected context fails for both impls, the rest are measured.
  std::map<std::string, int> ok_steps, oom;
  for (const auto& j : read_jsonl(dir + "/e2e.jsonl")) {
    const std::string key = j["impl"].get<std::string>();
    EXPECT_EQ(j["bench"], "e2e");
    if (j["status"] == "oom") {
      EXPECT_EQ(j["context"], 16) << j.dump();
      EXPECT_NE(j["reason"].get<std::string>().find("can't allocate memory"), std::string::npos) << j.dump();
      oom[key]++;
    } else if (j["metric"] == "step_ms") {
      EXPECT_EQ(j["status"], "ok") << j.dump();
      EXPECT_EQ(j["context"], 32) << j.dump();
      EXPECT_GT(j["value"].get<double>(), 0.0);
      ok_steps[key]++;
    }
    if (key == "torch-eager" && j["status"] == "ok") {  // the module's own fields reach the records
      EXPECT_EQ(j["torch_attention"], "sdpa") << j.dump();
    }
  }
  EXPECT_EQ(ok_steps["lmscale"], 2);
  EXPECT_EQ(ok_steps["torch-eager"], 2);
  EXPECT_EQ(oom["lmscale"], 2);
  EXPECT_EQ(oom["torch-eager"], 2);
  // Table: one row per config with both impls and the ratio; OOM stays OOM.
  const std::string md = sweep_table(dir);
  EXPECT_NE(md.find("lmscale vs torch-eager"), std::string::npos) << md;
  EXPECT_NE(md.find("## Per phase"), std::string::npos) << md;
  EXPECT_NE(md.find("| OOM"), std::string::npos) << md;
  EXPECT_NE(md.find("×"), std::string::npos) << md;
  EXPECT_NE(md.find("python -m lmscale.baseline.e2e"), std::string::npos) << md;
  EXPECT_EQ(md.find("not run"), std::string::npos) << md;
  EXPECT_EQ(md.find("†"), std::string::npos) << md;  // one invocation: no ratio is marked
}

TEST(BenchCompare, NaiveScopeWritesAttentionOut) {
  SKIP_WITHOUT_TORCH();
  auto dir = temp_dir("naive-scope");
  auto r = run_cli(std::string(kTiny) + "--context 16 --compare torch-eager --baseline-scope naive --out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int seen = 0;
  for (const auto& j : read_jsonl(dir + "/e2e.jsonl"))
    if (j["impl"] == "torch-eager") {
      EXPECT_EQ(j["torch_attention"], "naive") << j.dump();  // the row's backend is naive
      ++seen;
    }
  EXPECT_GT(seen, 0);
}

TEST(BenchCompare, GoesSizeBySize) {
  SKIP_WITHOUT_TORCH();
  auto r = run_cli("bench --device cpu --size tiny,custom --d-model 32 --d-ff 64 --layers 1 --heads 2 --batch 2 "
                   "--warmup 1 --steps 2 --context 16 --compare torch-eager --out " +
                   temp_dir("by-size"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Each size: lmscale, then the baseline's own process, before the next size starts.
  const std::vector<std::string> order = {"tiny ctx 16 fp32 train-step naive lmscale",
                                          "torch-eager: one Python process for tiny's 1 configs",
                                          "tiny ctx 16 fp32 train-step naive torch-eager",
                                          "tiny done: lmscale ",
                                          "custom ctx 16 fp32 train-step naive lmscale",
                                          "torch-eager: one Python process for custom's 1 configs",
                                          "custom ctx 16 fp32 train-step naive torch-eager",
                                          "custom done: lmscale "};
  size_t at = 0;
  for (const auto& line : order) {
    const size_t found = r.output.find(line, at);
    ASSERT_NE(found, std::string::npos) << "'" << line << "' missing or out of order:\n" << r.output;
    at = found + line.size();
  }
}

TEST(BenchCompare, MarksRatiosAcrossInvocations) {
  SKIP_WITHOUT_TORCH();
  auto dir = temp_dir("across");
  ASSERT_EQ(run_cli(std::string(kTiny) + "--context 16 --out " + dir).exit_code, 0);
  // Invocations are told apart by their start time (seconds): let the second start in a later second.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  auto r = run_cli(std::string(kTiny) + "--context 16 --compare torch-eager --resume --out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string md = sweep_table(dir);
  EXPECT_NE(md.find("× †"), std::string::npos) << md;  // lmscale from run 1, eager from run 2
  EXPECT_NE(md.find("1 ratios compare results of different invocations"), std::string::npos) << md;
}

TEST(BenchCompare, ResumingAFinishedSweepKeepsItsRatiosUnmarked) {
  SKIP_WITHOUT_TORCH();
  auto dir = temp_dir("rerender");
  const std::string cmd = std::string(kTiny) + "--context 16 --compare torch-eager --resume --out " + dir;
  ASSERT_EQ(run_cli(cmd).exit_code, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  auto r = run_cli(cmd);  // measures nothing: both results come from the first invocation
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resume: 2 of 2 results"), std::string::npos) << r.output;
  const std::string md = sweep_table(dir);
  EXPECT_NE(md.find("×"), std::string::npos) << md;
  EXPECT_EQ(md.find("†"), std::string::npos) << md;
}

TEST(BenchCompare, ResumeMeasuresOnlyWhatIsMissing) {
  auto dir = temp_dir("resume");
  ASSERT_EQ(run_cli(std::string(kTiny) + "--context 16 --out " + dir).exit_code, 0);
  auto r = run_cli(std::string(kTiny) + "--context 16,32 --resume --out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resume: 1 of 2 results"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[2/2 "), std::string::npos) << r.output;  // the resumed cell is counted as done
  std::map<int64_t, int> step_records;
  for (const auto& j : read_jsonl(dir + "/e2e.jsonl"))
    if (j["metric"] == "step_ms") step_records[j["context"].get<int64_t>()]++;
  EXPECT_EQ(step_records[16], 1);  // taken from the first run, not measured again
  EXPECT_EQ(step_records[32], 1);
  const std::string md = sweep_table(dir);
  EXPECT_NE(md.find("| 16 "), std::string::npos) << md;  // the table has both
  EXPECT_NE(md.find("| 32 "), std::string::npos) << md;
  EXPECT_NE(md.find("resumed (--resume): 1 results"), std::string::npos) << md;
}

TEST(BenchCompare, BadBaselineOrScopeFailsFast) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--impl lmscale,torch-jit", "'torch-jit' is not an implementation (one of lmscale, torch-eager, torch-compile, torch-compile-ro, torch-float8, torch-float8-ro)"},
      {"--impl lmscale,torch-eager --baseline-scope everything", "not a baseline scope (one of model, naive)"},
      {"--impl lmscale,torch-eager --compile-scope everything", "not a compile scope (one of blocks, model)"}};
  for (const auto& [args, must_mention] : cases) {
    auto r = run_cli(std::string(kTiny) + args + " --out " + temp_dir("scope"));
    EXPECT_NE(r.exit_code, 0) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(must_mention), std::string::npos) << args << "\n" << r.output;
  }
}

TEST(BenchCompare, OldCompileScopeSpellingStillWorks) {
  auto r = run_cli(std::string(kTiny) + "--context 16 --compile-scope blocks --out " + temp_dir("old-scope"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--compile-scope is deprecated; it means --baseline-scope naive"), std::string::npos)
      << r.output;
}

}  // namespace lmscale
