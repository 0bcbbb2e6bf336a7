// SIGTERM to `lmscale bench` while a PyTorch baseline runs (issue 29, row 4): the baseline process
// gets the signal and is waited for, the temporary config file is removed, and one line says what
// was kept and the `--resume` command. The "interpreter" is a script that records its pid and
// sleeps, so this runs on CPU without torch in Python.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <thread>

#include "support/run_cli.h"

namespace lmscale {
namespace {

using testing::read_text;
using testing::temp_dir;

// Starts argv with extra environment variables, stdout and stderr into `log`; returns its pid.
pid_t start(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& log) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  dup2(fd, STDOUT_FILENO);
  dup2(fd, STDERR_FILENO);
  for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execv(args[0], args.data());
  _exit(127);
}

bool alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

}  // namespace

TEST(Interrupt, SigtermDuringABaselineLeavesNoProcessNoTempFileAndSaysHowToResume) {
  const std::string dir = temp_dir("sigterm");
  const std::string tmp = dir + "/tmp", out = dir + "/out", pid_file = dir + "/baseline.pid";
  ::mkdir(tmp.c_str(), 0755);
  const std::string python = dir + "/python-that-sleeps";
  std::ofstream(python) << "#!/bin/sh\necho $$ > '" << pid_file << "'\nexec sleep 60\n";
  ::chmod(python.c_str(), 0755);

  const pid_t bench = start({LMSCALE_CLI_PATH, "bench", "--device", "cpu", "--size", "tiny", "--batch", "2", "--warmup",
                             "0", "--steps", "1", "--context", "16", "--impl", "lmscale,torch-eager", "--out", out},
                            {"LMSCALE_PYTHON=" + python, "TMPDIR=" + tmp}, dir + "/bench.log");
  ASSERT_GT(bench, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (read_text(pid_file).empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const pid_t baseline = static_cast<pid_t>(std::atol(read_text(pid_file).c_str()));
  ASSERT_GT(baseline, 0) << "the baseline never started:\n" << read_text(dir + "/bench.log");
  ASSERT_EQ(::kill(bench, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(bench, &status, 0), bench);
  const std::string log = read_text(dir + "/bench.log");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM) << log;
  EXPECT_FALSE(alive(baseline)) << "the baseline (pid " << baseline << ") outlived the bench";
  const auto ls = run_process({"ls", "-A", tmp}, ProcessOptions{true});
  EXPECT_EQ(ls.output, "") << "temporary files left behind";
  EXPECT_NE(log.find("stopped by SIGTERM: 1 of 2 cells are kept in " + out + "/e2e.jsonl"), std::string::npos) << log;
  EXPECT_NE(log.find("continue with: lmscale bench"), std::string::npos) << log;
  EXPECT_NE(log.find("--resume"), std::string::npos) << log;
}

}  // namespace lmscale
