// run_process: arguments reach the program verbatim (no shell), exit codes and signals are real,
// output streams line by line, and a missing program is a message, not a crash.
#include <gtest/gtest.h>

#include "core/process.h"
#include "core/status.h"

using lmscale::ProcessOptions;
using lmscale::run_process;

TEST(RunProcess, PassesArgumentsVerbatimWithoutAShell) {
  const std::string nasty = "it's $(touch /nonexistent/x); echo `id` \"q\" ; *";
  ProcessOptions o;
  o.capture_stdout = true;
  auto r = run_process({"printf", "%s", nasty}, o);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.output, nasty);
}

TEST(RunProcess, ReportsTheExitCodeAndTheSignal) {
  auto r = run_process({"sh", "-c", "exit 3"});
  EXPECT_TRUE(r.started);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.describe(), "exited with code 3");
  auto k = run_process({"sh", "-c", "kill -9 $$"});
  EXPECT_EQ(k.term_signal, 9);
  EXPECT_NE(k.describe().find("signal 9"), std::string::npos);
}

TEST(RunProcess, StreamsLinesAndSetsTheEnvironment) {
  ProcessOptions o;
  o.capture_stdout = true;
  o.env = {{"LMSCALE_PROCESS_TEST", "v"}};
  std::vector<std::string> lines;
  o.on_line = [&](const std::string& l) { lines.push_back(l); };
  auto r = run_process({"sh", "-c", "echo a; echo \"$LMSCALE_PROCESS_TEST\"; printf tail"}, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(lines, (std::vector<std::string>{"a", "v", "tail"}));
}

TEST(RunProcess, AMissingProgramIsAMessage) {
  auto r = run_process({"lmscale-no-such-program-xyz"});
  EXPECT_FALSE(r.started);
  EXPECT_NE(r.describe().find("could not start 'lmscale-no-such-program-xyz'"), std::string::npos)
      << r.describe();
}

TEST(Status, RoundTripsAndReadsOldSpellings) {
  using lmscale::Status;
  for (Status s : {Status::ok, Status::oom, Status::capture_failed, Status::error, Status::skipped})
    EXPECT_EQ(lmscale::status_from_string(lmscale::to_string(s)), s);
  EXPECT_EQ(lmscale::status_from_string("OOM"), Status::oom);
  EXPECT_THROW(lmscale::status_from_string("fine"), std::invalid_argument);
  EXPECT_FALSE(lmscale::is_failure(Status::oom));
  EXPECT_TRUE(lmscale::is_failure(Status::capture_failed));
}
