// `lmscale train` where a careful user expects it to refuse or stop (the faults of a new user's tries):
// divergence stops the run loudly; --resume never glues a record onto a cut line nor keeps another
// corpus's curve; every numeric flag and the output folder are checked before anything is written;
// a SIGTERM leaves no temporary file; the report does not call step 0 incomplete.
#include <gtest/gtest.h>

#include <filesystem>
#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "core/process.h"
#include "core/python_module.h"
#include "results/reader.h"
#include "support/run_cli.h"
#include "support/temp_dirs.h"
#include "train_app/train_run.h"

namespace lmscale {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;
using testing::run_cli_argv;

// A corpus made by `lmscale train corpus` from a folder of small, regular "source files"; `salt`
// changes every file's content (a different corpus of the same name and nearly the same size).
std::string corpus(const std::string& tag, int salt = 0) {
  const std::string src = testing::temp_dir(tag + "-src"), out = testing::temp_dir(tag);
  for (int f = 0; f < 30; ++f) {
    std::ofstream o(src + "/mod" + std::to_string(f) + ".py");
    for (int i = 0; i < 50; ++i)
      o << "def f" << (i * 7 + f + salt) % 23 << "(x):\n    return x * " << (i + salt) % 5 << " + " << f % 3 << "\n";
  }
  const auto r = run_cli_argv({"train", "corpus", "--from", src, "--out", out, "--val-percent", "20"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return out;
}

// The arguments of a short CPU run on `corpus` into `out` (8 steps, evaluated every 4, unless `extra`
// says otherwise: a flag given twice is a usage error), then `extra`.
std::vector<std::string> train_args(const std::string& corpus, const std::string& out,
                                    std::vector<std::string> extra = {}) {
  std::vector<std::string> a{"train", "--device", "cpu", "--corpus", corpus, "--context", "32", "--eval-batches", "1",
                             "--out", out};
  auto given = [&](const char* flag) { return std::find(extra.begin(), extra.end(), flag) != extra.end(); };
  if (!given("--steps")) a.insert(a.end(), {"--steps", "8"});
  if (!given("--eval-every")) a.insert(a.end(), {"--eval-every", "4"});
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

int count(const std::vector<Json>& records, const std::string& metric, const std::string& status = "ok") {
  int n = 0;
  for (const auto& r : records) n += r.value("metric", "") == metric && r.value("status", "") == status;
  return n;
}

TEST(TrainFaults, DivergenceStopsTheRunNamingTheStepAndTheCause) {
  const std::string c = corpus("diverge"), out = testing::temp_dir("diverge-out");
  auto r = run_cli_argv(train_args(c, out, {"--lr", "1e30"}));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("diverged at step"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("learning rate, --lr 1e+30"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step 8/8"), std::string::npos) << "trained on after the divergence:\n" << r.output;
  const auto records = read_jsonl(out + "/train.jsonl");
  ASSERT_FALSE(records.empty());
  const Json& last = records.back();
  EXPECT_EQ(last["status"], "diverged") << last.dump();
  EXPECT_GT(last["step"].get<int64_t>(), 0);
  for (const auto& rec : records)  // never a null value marked ok
    EXPECT_FALSE(rec.value("status", "") == "ok" && rec["value"].is_null()) << rec.dump();
  // The report shows it; --resume does not count the run done (it runs, and diverges, again).
  r = run_cli_argv({"report", "--in", out, "--out", out, "--no-plots"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(testing::read_text(out + "/train.md").find("diverged"), std::string::npos);
  auto args = train_args(c, out, {"--lr", "1e30", "--resume"});
  r = run_cli_argv(args);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output.find("already (--resume): not run"), std::string::npos) << r.output;
  EXPECT_EQ(count(read_jsonl(out + "/train.jsonl"), "status", "diverged"), 2);
}

// Records an older lmscale wrote for a diverged run (NaN as null, status ok) are not evaluations done.
TEST(TrainFaults, NullValuesAreNotRecordedEvaluations) {
  TrainRun run;
  const Json key = train_run_fields(run);
  Json rec = key;
  rec.update(Json{{"bench", "train"}, {"metric", "val_loss"}, {"status", "ok"}, {"step", 0}, {"value", nullptr}});
  Json good = rec;
  good["step"] = 4;
  good["value"] = 2.5;
  EXPECT_EQ(recorded_evaluations({rec, good}, run), std::set<int64_t>{4});
}

TEST(TrainFaults, ResumeNeverGluesOntoACutLastLine) {
  const std::string c = corpus("glue"), out = testing::temp_dir("glue-out");
  ASSERT_EQ(run_cli_argv(train_args(c, out, {"--steps", "4", "--eval-every", "2"})).exit_code, 0);
  const auto whole = read_jsonl(out + "/train.jsonl");
  // Keep step 0 and half of the step-2 evaluation's first line: a run cut mid-write by a full disk.
  std::string text = testing::read_text(out + "/train.jsonl"), kept;
  size_t at = 0;
  for (const auto& rec : whole) {
    const size_t end = text.find('\n', at) + 1;
    if (rec["step"] == 0) kept += text.substr(at, end - at);
    at = end;
  }
  const std::string fragment = text.substr(kept.size(), 60);
  std::ofstream(out + "/train.jsonl", std::ios::trunc) << kept << fragment;
  auto r = run_cli_argv(train_args(c, out, {"--steps", "4", "--eval-every", "2", "--resume"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("moved to " + out + "/train.jsonl.damaged"), std::string::npos) << r.output;
  EXPECT_EQ(testing::read_text(out + "/train.jsonl.damaged"), fragment + "\n");
  const auto resumed = read_jsonl(out + "/train.jsonl");  // throws on a glued line
  EXPECT_EQ(resumed.size(), whole.size());
  // A second --resume finds the run complete: nothing measured twice.
  r = run_cli_argv(train_args(c, out, {"--steps", "4", "--eval-every", "2", "--resume"}));
  EXPECT_NE(r.output.find("already (--resume): not run"), std::string::npos) << r.output;
  EXPECT_EQ(read_jsonl(out + "/train.jsonl").size(), whole.size());
}

TEST(TrainFaults, ResumeTellsCorporaApart) {
  const std::string a = corpus("corpus-a"), b = corpus("corpus-b", 1), out = testing::temp_dir("corpora-out");
  ASSERT_EQ(run_cli_argv(train_args(a, out)).exit_code, 0);
  auto r = run_cli_argv(train_args(b, out, {"--resume"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("already (--resume): not run"), std::string::npos) << "corpus b was not trained:\n" << r.output;
  std::set<std::string> hashes;
  for (const auto& rec : read_jsonl(out + "/train.jsonl")) {
    EXPECT_EQ(rec["corpus"], "files");  // one name for both: the hash and counts tell them apart
    hashes.insert(rec["corpus_hash"].get<std::string>());
    EXPECT_GT(rec["train_tokens"].get<int64_t>(), 0);
  }
  EXPECT_EQ(hashes.size(), 2u);
  EXPECT_EQ(count(read_jsonl(out + "/train.jsonl"), "val_loss"), 6);  // steps 0, 4, 8 of each corpus
}

TEST(TrainFaults, NumericFlagsAreRefusedUpFrontNamingTheFlag) {
  const std::string c = corpus("flags"), out = testing::temp_dir("flags-out") + "/never";
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--clip", "inf"}, {"--lr", "inf"}, {"--lr", "nan"}, {"--lr-min", "-inf"},
           {"--steps", "99999999999999999999"}, {"--steps", "20000000"}, {"--seed", "-1"}, {"--eval-every", "0"},
           {"--eval-batches", "1e9"}}) {
    const auto r = run_cli_argv(train_args(c, out, {flag, value}));
    EXPECT_EQ(r.exit_code, 2) << flag << " " << value << ":\n" << r.output;
    EXPECT_NE(r.output.find(flag), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("step 0/"), std::string::npos) << "ran before refusing:\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(out)) << "written before the flags were checked";
}

TEST(TrainFaults, OutputFolderAndInputsAreCheckedBeforeAnythingIsWritten) {
  const std::string c = corpus("out-check"), dir = testing::temp_dir("out-check-out");
  std::ofstream(dir + "/file") << "x";
  for (const std::string& out : {dir + "/file", std::string()}) {
    const auto r = run_cli_argv(train_args(c, out));
    EXPECT_EQ(r.exit_code, 2) << "--out '" << out << "':\n" << r.output;
    EXPECT_NE(r.output.find("--out"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("step 0/"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(fs::exists("/train.jsonl"));
  // A missing corpus: refused naming it, and no results folder made for it.
  const auto r = run_cli_argv(train_args(dir + "/no-corpus", dir + "/results"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(dir + "/no-corpus/train.bin"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir + "/results")) << r.output;
}

// The PyTorch reference's temporary files (the run, lmscale's initial weights in fp32 and their index)
// are removed by a SIGTERM too. The interpreter is a stand-in that notes it started and sleeps.
TEST(TrainFaults, SigtermDuringTheReferenceLeavesNoTemporaryFile) {
  const std::string c = corpus("sigterm"), t = testing::temp_dir("sigterm-out"), tmp = t + "/tmp";
  fs::create_directories(tmp);
  std::ofstream(t + "/python") << "#!/bin/sh\necho started > '" << t << "/started'\nexec sleep 60\n";
  fs::permissions(t + "/python", fs::perms::owner_all);
  std::string args;
  for (const auto& a : train_args(c, t + "/out", {"--impl", "torch-eager"})) args += " '" + a + "'";
  // The binary in the background; once the reference started: the temp folder, SIGTERM, its status.
  const auto r = run_cli(args + " 2>&1 & pid=$!; for i in $(seq 300); do [ -f '" + t + "/started' ] && break; sleep 0.1; done; "
                                "echo during: $(ls '" + tmp + "' | wc -l); kill -TERM $pid; wait $pid; echo status $?",
                         "TMPDIR='" + tmp + "' LMSCALE_PYTHON='" + t + "/python'");
  EXPECT_NE(r.output.find("during: 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("status 143"), std::string::npos) << r.output;
  std::string left;
  for (const auto& e : fs::directory_iterator(tmp)) left += e.path().filename().string() + " ";
  EXPECT_EQ(left, "") << r.output;
}

TEST(TrainFaults, ReportCallsStepZeroCompleteAndShowsAllRuns) {
  const std::string c = corpus("step0"), out = testing::temp_dir("step0-out");
  ASSERT_EQ(run_cli_argv(train_args(c, out)).exit_code, 0);
  const auto r = run_cli_argv({"report", "--in", out, "--out", out, "--no-plots"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string md = testing::read_text(out + "/train.md");
  EXPECT_EQ(md.find("incomplete"), std::string::npos) << md;
  EXPECT_NE(md.find("val_loss"), std::string::npos) << md;
}

// `report` run away from the checkout: the build's interpreter (./lmscale made it with matplotlib),
// not whatever python3 is first on PATH; no default --out outside a checkout.
TEST(TrainFaults, ReportFindsTheBuildsPythonAndNeedsOutAwayFromACheckout) {
  const std::string c = corpus("report-py"), out = testing::temp_dir("report-py-out");
  ASSERT_EQ(run_cli_argv(train_args(c, out)).exit_code, 0);
  const std::string away = testing::temp_dir("report-away");
  auto r = run_cli("report --in '" + out + "'", "cd '" + away + "' &&");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--out is needed here"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(away + "/docs")) << r.output;
  // LMSCALE_PYTHON unset: the interpreter the build was configured with draws the plots.
  r = run_cli("report --in '" + out + "' --out '" + away + "/r'", "cd '" + away + "' && LMSCALE_PYTHON=");
  const char* set = std::getenv("LMSCALE_PYTHON");
  const std::string saved = set ? set : "";
  ::unsetenv("LMSCALE_PYTHON");
  const std::string built = python_interpreter();  // what the CLI finds without the variable
  if (!saved.empty()) ::setenv("LMSCALE_PYTHON", saved.c_str(), 1);
  EXPECT_NE(built, "python3") << "no Python3_EXECUTABLE in the build folder's CMakeCache.txt";
  ProcessOptions quiet;
  quiet.capture_stdout = quiet.merge_stderr = true;
  if (run_process({built, "-c", "import matplotlib"}, quiet).ok()) {
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(fs::exists(away + "/r/train.png")) << r.output;
  } else {
    EXPECT_EQ(r.exit_code, 1) << r.output;  // plots asked for and not drawn: said, and not exit 0
    EXPECT_NE(r.output.find("--no-plots"), std::string::npos) << r.output;
  }
}

// The PyTorch reference stops at a divergence the same way (its module says so in one line).
TEST(TrainFaults, TheReferenceStopsAtADivergenceToo) {
  ProcessOptions quiet;
  quiet.capture_stdout = quiet.merge_stderr = true;
  if (!run_process({python_interpreter(), "-c", "import torch"}, quiet).ok())
    GTEST_SKIP() << python_interpreter() << " cannot import torch (./lmscale test sets LMSCALE_PYTHON)";
  const std::string c = corpus("diverge-ref"), out = testing::temp_dir("diverge-ref-out");
  const auto r = run_cli_argv(train_args(c, out, {"--lr", "1e30", "--impl", "lmscale,torch-eager"}));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("torch-eager fp32: diverged at step"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("lmscale fp32: diverged at step"), std::string::npos) << r.output;
  EXPECT_EQ(count(read_jsonl(out + "/train.jsonl"), "status", "diverged"), 2);
}

}  // namespace
}  // namespace lmscale
