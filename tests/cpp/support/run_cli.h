// Test support: run the `lmscale` CLI binary (path baked in at build time) with arguments and an
// optional environment prefix, capturing its exit code and combined output. run_cli takes a shell
// fragment (for tests that want redirections); run_cli_argv passes each argument verbatim.
#pragma once
#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>
#include <vector>

#include "core/process.h"
#include "support/temp_dirs.h"

namespace lmscale::testing {

struct CliResult {
  int exit_code = -1;
  std::string output;
};

inline CliResult run_cli(const std::string& args, const std::string& env = "") {
  std::string cmd = env + " '" LMSCALE_CLI_PATH "' " + args + " 2>&1";
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), p)) r.output += buf.data();
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline CliResult run_cli_argv(const std::vector<std::string>& args,
                              const std::vector<std::pair<std::string, std::string>>& env = {}) {
  std::vector<std::string> argv{LMSCALE_CLI_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcessOptions o;
  o.capture_stdout = true;
  o.merge_stderr = true;
  o.env = env;
  const ProcessResult p = run_process(argv, o);
  return CliResult{p.started && p.term_signal == 0 ? p.exit_code : -1, p.output};
}

}  // namespace lmscale::testing
