// The sweep (src/bench/e2e_sweep.cpp) on a tiny CPU config: `lmscale bench --compare` runs one
// Python process per baseline and size (scripts/torch_baseline.py's batch mode: one result line per
// config, ids and JSON checked), size by size, records per config, the side-by-side table, an
// injected out-of-memory config that becomes a cell while the batch goes on, a missing Python that
// becomes error cells instead of a crash, --resume, and the mark on ratios across invocations. torch.compile is not run here: Inductor's
// CPU code generation takes minutes on the 2-core CI machine (LMSCALE_TEST_COMPILE=1 runs it).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "core/results.h"
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

std::string python() {
  const char* p = std::getenv("LMSCALE_PYTHON");
  return p && *p ? p : "python3";
}

bool python_has_torch() {
  static const bool has = std::system(("'" + python() + "' -c 'import torch' >/dev/null 2>&1").c_str()) == 0;
  return has;
}

#define SKIP_WITHOUT_TORCH() \
  if (!python_has_torch()) GTEST_SKIP() << python() << " cannot import torch (./lmscale test sets LMSCALE_PYTHON)"

// Runs a shell command; stdout lines that are JSON objects are parsed (stderr is dropped).
struct ScriptRun {
  int exit_code = -1;
  std::vector<Json> results;
  std::string output;
};

ScriptRun run_shell(const std::string& cmd) {
  ScriptRun r;
  FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (!p) return r;
  std::array<char, 1 << 16> buf{};
  while (fgets(buf.data(), buf.size(), p)) {
    std::string line = buf.data();
    r.output += line;
    if (!line.empty() && line.front() == '{') r.results.push_back(Json::parse(line));
  }
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string script() { return "'" + python() + "' '" LMSCALE_SOURCE_DIR "/scripts/torch_baseline.py'"; }

// The script in batch mode over configs (written to a file, one JSON line each).
ScriptRun run_script(const std::string& impl, const std::vector<Json>& configs, const std::string& env = "") {
  const std::string file = temp_dir("baseline") + "/configs.jsonl";
  std::ofstream out(file);
  for (const auto& c : configs) out << c.dump() << "\n";
  out.close();
  return run_shell(env + " " + script() + " --impl " + impl + " --configs " + file);
}

Json tiny_config(int id, int64_t context, const std::string& mode) {
  return Json{{"id", id},         {"size", "tiny"},       {"vocab", 512},         {"d_model", 64},
              {"d_ff", 256},      {"layers", 2},          {"heads", 4},           {"context", context},
              {"model_context", 32}, {"batch", 2},        {"precision", "fp32"},  {"mode", mode},
              {"attention", "naive"}, {"warmup", 1},      {"steps", 2},           {"device", "cpu"}};
}

}  // namespace

TEST(TorchBaselineScript, BatchModeAnswersEveryConfigInOneProcessAndSurvivesOom) {
  SKIP_WITHOUT_TORCH();
  // Context 16 is injected out of memory; the configs after it must still run on the same model.
  std::vector<Json> configs = {tiny_config(0, 16, "train-step"), tiny_config(1, 32, "forward"),
                               tiny_config(2, 32, "forward-backward"), tiny_config(3, 32, "train-step")};
  auto r = run_script("eager", configs, "LMSCALE_INJECT_OOM=tiny:16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(r.results.size(), configs.size()) << r.output;
  for (size_t i = 0; i < configs.size(); ++i) {
    const Json& j = r.results[i];
    EXPECT_EQ(j["id"], i) << j.dump();  // one line per config, in order, as each finishes
    if (i == 0) {
      EXPECT_EQ(j["status"], "oom") << j.dump();
      EXPECT_NE(j["message"].get<std::string>().find("injected"), std::string::npos) << j.dump();
      continue;
    }
    ASSERT_EQ(j["status"], "ok") << j.dump();
    EXPECT_EQ(j["step_ms"]["n"], 2);
    EXPECT_GT(j["step_ms"]["mean"].get<double>(), 0.0);
    EXPECT_EQ(j["all_step_ms"].size(), 3u);  // warm-up included
    EXPECT_EQ(j["warmup_steps_run"], 1);
    const std::string mode = configs[i]["mode"];
    EXPECT_EQ(j["backward_ms"].is_null(), mode == "forward") << j.dump();
    EXPECT_EQ(j["optimizer_ms"].is_null(), mode != "train-step") << j.dump();
    EXPECT_FALSE(j.contains("compile_s"));  // eager compiles nothing
  }
}

TEST(TorchBaselineScript, SingleConfigCliStillPrintsOneResult) {
  SKIP_WITHOUT_TORCH();
  auto r = run_shell(script() + " --impl eager --vocab 512 --d-model 64 --d-ff 256 --layers 2 --heads 4" +
                     " --context 16 --batch 2 --precision fp32 --mode forward-backward --warmup 1 --steps 2" +
                     " --device cpu");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(r.results.size(), 1u) << r.output;
  const Json& j = r.results.back();
  EXPECT_EQ(j["status"], "ok") << r.output;
  EXPECT_EQ(j["step_ms"]["n"], 2);
  EXPECT_FALSE(j["backward_ms"].is_null());
}

TEST(BenchCompare, EagerBaselineRunsAsOneProcessWithRecordsAndRatios) {
  SKIP_WITHOUT_TORCH();
  auto dir = temp_dir("compare");
  auto r = run_cli(std::string(kTiny) + "--context 16,32 --mode forward,train-step --compare torch-eager --out " + dir,
                   "LMSCALE_INJECT_OOM=tiny:16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("torch-eager: one Python process for tiny's 4 configs"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[8/8]"), std::string::npos) << r.output;  // a progress line per config and impl
  // Records: per impl and config; the injected context fails for both impls, the rest are measured.
  std::map<std::string, int> ok_steps, oom;
  for (const auto& j : read_jsonl(dir + "/e2e.jsonl")) {
    const std::string key = j["impl"].get<std::string>();
    EXPECT_EQ(j["bench"], "e2e");
    if (j["status"] == "oom") {
      EXPECT_EQ(j["context"], 16) << j.dump();
      oom[key]++;
    } else if (j["metric"] == "step_ms") {
      EXPECT_EQ(j["status"], "ok") << j.dump();
      EXPECT_EQ(j["context"], 32) << j.dump();
      EXPECT_GT(j["value"].get<double>(), 0.0);
      ok_steps[key]++;
    }
    if (key == "torch-eager" && j["status"] == "ok") {
      EXPECT_EQ(j["torch_attention"], "naive") << j.dump();  // the script's own fields reach the records
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
  EXPECT_EQ(md.find("not run"), std::string::npos) << md;
  EXPECT_EQ(md.find("†"), std::string::npos) << md;  // one invocation: no ratio is marked
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

TEST(BenchCompare, MissingPythonGivesErrorCellsNotACrash) {
  auto dir = temp_dir("nopython");
  auto r = run_cli(std::string(kTiny) + "--context 16 --compare torch-eager --out " + dir,
                   "LMSCALE_PYTHON=/nonexistent/python");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int errors = 0;
  for (const auto& j : read_jsonl(dir + "/e2e.jsonl"))
    if (j["impl"] == "torch-eager") {
      EXPECT_EQ(j["status"], "error") << j.dump();
      EXPECT_NE(j["reason"].get<std::string>().find("gave no result"), std::string::npos) << j.dump();
      ++errors;
    }
  EXPECT_EQ(errors, 1);
}

TEST(BenchCompare, CompileBaselineSharesGraphsAcrossContexts) {
  SKIP_WITHOUT_TORCH();
  if (!std::getenv("LMSCALE_TEST_COMPILE"))
    GTEST_SKIP() << "torch.compile on CPU takes minutes on the 2-core CI machine; LMSCALE_TEST_COMPILE=1 runs it";
  std::vector<Json> configs = {tiny_config(0, 16, "forward"), tiny_config(1, 16, "train-step"),
                               tiny_config(2, 32, "forward"), tiny_config(3, 32, "train-step")};
  auto r = run_script("compile", configs);
  ASSERT_EQ(r.results.size(), configs.size()) << r.output;
  for (const auto& j : r.results) {
    ASSERT_EQ(j["status"], "ok") << j.dump();
    EXPECT_EQ(j["compiled_in_timed_steps"], 0) << j.dump();
    EXPECT_EQ(j["dynamic_shapes"], "context");
  }
  EXPECT_GT(r.results[0]["graphs_compiled"].get<int>(), 0);  // no-grad graphs
  EXPECT_GT(r.results[1]["graphs_compiled"].get<int>(), 0);  // training graphs
  EXPECT_EQ(r.results[2]["graphs_compiled"], 0);             // context 32 reuses them
  EXPECT_EQ(r.results[3]["graphs_compiled"], 0);
}

TEST(BenchCompare, ResumeMeasuresOnlyWhatIsMissing) {
  auto dir = temp_dir("resume");
  ASSERT_EQ(run_cli(std::string(kTiny) + "--context 16 --out " + dir).exit_code, 0);
  auto r = run_cli(std::string(kTiny) + "--context 16,32 --resume --out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resume: 1 of 2 results"), std::string::npos) << r.output;
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

TEST(BenchCompare, BadCompileScopeFailsFast) {
  auto r = run_cli(std::string(kTiny) + "--compile-scope everything --out " + temp_dir("scope"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("use blocks"), std::string::npos) << r.output;
}

}  // namespace lmscale
