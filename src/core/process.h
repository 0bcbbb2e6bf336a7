// Starting another program without a shell: the arguments go to execvp as a vector, so no path or
// value can be read as shell syntax (quotes, `;`, `$()`), and the caller gets a real exit code or
// signal rather than a raw wait status. Every subprocess of lmscale (baselines, plots, git) starts here;
// each dies with lmscale (PR_SET_PDEATHSIG) and is signalled and waited for when lmscale is stopped
// by SIGTERM/SIGINT (core/interrupt.h).
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace lmscale {

struct ProcessOptions {
  bool capture_stdout = false;   // collect stdout into ProcessResult::output (else inherited)
  bool merge_stderr = false;     // with capture_stdout: stderr goes to the same pipe
  std::string stdin_path;        // file to read as stdin ("" = inherited)
  std::string working_dir;       // "" = the caller's
  std::vector<std::pair<std::string, std::string>> env;  // set (or override) in the child
  // With capture_stdout: called with each line as it arrives (without '\n'), for streaming output.
  std::function<void(const std::string&)> on_line;
};

struct ProcessResult {
  bool started = false;  // false: the program could not be started (see error)
  int exit_code = -1;    // the program's exit code when it exited normally
  int term_signal = 0;   // the signal that ended it, else 0
  std::string output;    // captured stdout (and stderr when merged)
  std::string error;     // why it could not start
  bool ok() const { return started && term_signal == 0 && exit_code == 0; }
  // "exited with code 3", "killed by signal 9 (Killed)", "could not start 'x': No such file ..."
  std::string describe() const;
};

// argv as one line a person can read and paste into a shell (arguments with spaces, quotes or shell
// syntax single-quoted). For messages only: lmscale never hands this string to a shell.
std::string display_command(const std::vector<std::string>& argv);

// Runs argv[0] (looked up in PATH) with argv, waits for it. Never throws for a failing program;
// throws std::invalid_argument for an empty argv.
ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options = {});

}  // namespace lmscale
