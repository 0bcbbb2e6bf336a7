// Test support: run the `lmscale` CLI binary (path baked in at build time) with arguments and an
// optional environment prefix, capturing its exit code and combined output.
#pragma once
#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>

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

// A fresh empty folder under the system temp dir.
inline std::string temp_dir(const std::string& tag) {
  std::string tmpl = "/tmp/lmscale-test-" + tag + "-XXXXXX";
  char* made = mkdtemp(tmpl.data());
  return made ? std::string(made) : std::string();
}

}  // namespace lmscale::testing
