// `lmscale launch` where the rendezvous cannot work: every flag refused before a rank starts (exit 2,
// naming the flag); a port already taken, an address that does not resolve or is not this machine's
// said in one line; a store that never answers said in a few lines naming the address, the port, the
// flags and the variable (no C++ stack trace); and torchrun's agent dying takes its ranks with it.
// Real processes over Gloo, on loopback only.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "core/process.h"
#include "core/python_module.h"
#include "distributed/launcher.h"
#include "support/run_cli.h"

namespace lmscale {
namespace {

using testing::run_cli;
using testing::run_cli_argv;

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

const std::vector<std::string> kComm = {"--", "bench", "comm", "--backend", "gloo", "--sizes-mb", "1", "--iters", "1"};

std::vector<std::string> launch(std::vector<std::string> flags) {
  std::vector<std::string> a{"launch"};
  a.insert(a.end(), flags.begin(), flags.end());
  a.insert(a.end(), kComm.begin(), kComm.end());
  a.insert(a.end(), {"--out", testing::temp_dir("launch-faults")});
  return a;
}

TEST(LaunchFaults, EveryFlagIsRefusedUpFrontNamingIt) {
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--master-port", "70000"}, {"--master-port", "-5"}, {"--timeout", "-1"}, {"--timeout", "nan"},
           {"--timeout", "inf"}, {"--master-addr", ""}, {"--node-rank", "3"}, {"--node-rank", "-1"}}) {
    const auto start = std::chrono::steady_clock::now();
    const auto r = run_cli_argv(launch({"-n", "2", flag, value}));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(r.exit_code, 2) << flag << " " << value << ":\n" << r.output;
    EXPECT_NE(r.output.find(flag), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("[rank "), std::string::npos) << "a rank started:\n" << r.output;
    EXPECT_LT(s, 60.0) << r.output;  // the CLI's start-up alone, on a loaded 2-core machine; no rendezvous
  }
}

TEST(LaunchFaults, APortInUseIsOneLineNamingTheFix) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(sa);
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  const std::string port = std::to_string(ntohs(sa.sin_port));
  const auto r = run_cli_argv(launch({"-n", "2", "--master-port", port}));
  close(fd);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--master-port " + port + " is taken"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("or 0 to pick a free one"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("firewall"), std::string::npos) << r.output;
  EXPECT_LE(lines(r.output), 2) << r.output;
}

TEST(LaunchFaults, AnAddressThatDoesNotResolveOrIsNotThisMachinesFailsAtOnce) {
  for (const std::string& addr : {std::string("no-such-host.invalid"), std::string("192.0.2.1")}) {
    const auto start = std::chrono::steady_clock::now();
    const auto r = run_cli_argv(launch({"-n", "2", "--master-addr", addr}));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("--master-addr " + addr), std::string::npos) << r.output;
    EXPECT_LE(lines(r.output), 2) << r.output;
    EXPECT_LT(s, 60.0) << r.output;  // at once: no rendezvous timeout (300 s by default) is waited out
  }
}

// Node 1 of 2 with no node 0: its rank waits for a store nobody serves (a free loopback port), then
// says so in a few lines, well within two timeouts.
TEST(LaunchFaults, AStoreThatNeverAnswersIsSaidInAFewLines) {
  const std::string port = std::to_string(distributed::pick_free_port());
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_cli_argv(launch({"--nnodes", "2", "--node-rank", "1", "-n", "1", "--master-port", port}),
                              {{"LMSCALE_DIST_TIMEOUT_S", "3"}});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(s, 60.0) << r.output;  // two tries of the 3 s timeout and the CLI's start-up
  for (const std::string& part : {"127.0.0.1:" + port, std::string("--master-addr"), std::string("--master-port"),
                                  std::string("LMSCALE_DIST_TIMEOUT_S")})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << " not in:\n" << r.output;
  EXPECT_EQ(r.output.find("frame #"), std::string::npos) << r.output;
  EXPECT_LE(lines(r.output), 8) << r.output;
}

// torchrun's agent serves the store and is the ranks' parent: killed (so it cannot stop them), its
// ranks stop too instead of training on as orphans and recording a slowed step as a clean one.
TEST(LaunchFaults, RanksStopWhenTorchrunsAgentDies) {
  ProcessOptions quiet;
  quiet.capture_stdout = quiet.merge_stderr = true;
  const std::string py = python_interpreter();
  if (!run_process({py, "-c", "import torch.distributed.run"}, quiet).ok())
    GTEST_SKIP() << py << " has no torch.distributed.run (./lmscale test sets LMSCALE_PYTHON)";
  const std::string t = testing::temp_dir("agent");
  // The agent in the background, then: its ranks once they train, SIGKILL to it, and which ranks are
  // still running 15 s later (a zombie waiting for its reaper has ended).
  const std::string script =
      "'" + py + "' -m torch.distributed.run --nproc-per-node 2 --master-port " +
      std::to_string(distributed::pick_free_port()) + " --no-python '" LMSCALE_CLI_PATH
      "' bench ddp --backend gloo --size tiny --context 16 --precision fp32 --impl bucketed --warmup 1 --steps 100000 "
      "--out '" + t + "/out' > '" + t + "/log' 2>&1 & agent=$!; "
      "for i in $(seq 600); do [ $(pgrep -P $agent | wc -l) -ge 2 ] && break; sleep 0.1; done; sleep 8; "
      "ranks=$(pgrep -P $agent); echo ranks: $ranks; kill -KILL $agent; "
      "for i in $(seq 150); do left=''; for p in $ranks; do st=$(ps -o stat= -p $p) && case $st in Z*) ;; *) left=\"$left $p\";; esac; done; "
      "[ -z \"$left\" ] && break; sleep 0.1; done; echo left:$left; for p in $left; do kill -KILL $p; done";
  const ProcessResult r = run_process({"/bin/sh", "-c", script}, quiet);
  EXPECT_NE(r.output.find("ranks: "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("ranks: \n"), std::string::npos) << "no rank started:\n" << r.output << testing::read_text(t + "/log");
  EXPECT_NE(r.output.find("left:\n"), std::string::npos) << "orphans:\n" << r.output << testing::read_text(t + "/log");
}

}  // namespace
}  // namespace lmscale
