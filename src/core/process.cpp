// run_process: fork + execvp with an argument vector (see process.h for why no shell).
#include "core/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "core/interrupt.h"

extern char** environ;

namespace lmscale {

std::string ProcessResult::describe() const {
  if (!started) return error;
  if (term_signal != 0)
    return "killed by signal " + std::to_string(term_signal) + " (" + strsignal(term_signal) + ")";
  return "exited with code " + std::to_string(exit_code);
}

std::string display_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    if (!a.empty() && a.find_first_of(" \t\n\"'\\$`;&|<>()*?[]{}#~!") == std::string::npos) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

namespace {

// The child's half: redirect, change folder, set the environment, exec. Reports a failure to
// start through err_fd (close-on-exec, so a successful exec closes it with nothing written).
[[noreturn]] void exec_child(const std::vector<std::string>& argv, const ProcessOptions& o,
                             int out_fd, int err_fd, pid_t parent) {
  auto fail = [&](const std::string& what) {
    std::string msg = what + ": " + std::strerror(errno);
    (void)!write(err_fd, msg.data(), msg.size());
    _exit(127);
  };
  // The child dies with lmscale even when lmscale cannot tell it to (SIGKILL, a crash): no orphaned
  // baseline keeps a core busy. The signal comes when the forking thread ends, and run_process runs
  // on the thread that waits for the child. A parent already gone before prctl: end now.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(127);
  if (!o.stdin_path.empty()) {
    int in = open(o.stdin_path.c_str(), O_RDONLY);
    if (in < 0 || dup2(in, STDIN_FILENO) < 0) fail("could not open '" + o.stdin_path + "' as stdin");
    close(in);
  }
  if (out_fd >= 0) {
    if (dup2(out_fd, STDOUT_FILENO) < 0) fail("dup2");
    if (o.merge_stderr && dup2(out_fd, STDERR_FILENO) < 0) fail("dup2");
    close(out_fd);
  }
  if (!o.working_dir.empty() && chdir(o.working_dir.c_str()) != 0)
    fail("could not enter '" + o.working_dir + "'");
  for (const auto& [k, v] : o.env) setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> c_args;
  for (const auto& a : argv) c_args.push_back(const_cast<char*>(a.c_str()));
  c_args.push_back(nullptr);
  execvp(c_args[0], c_args.data());
  fail("could not start '" + argv[0] + "'");
  _exit(127);  // fail() does not return; this says so to the compiler
}

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& o) {
  if (argv.empty()) throw std::invalid_argument("run_process: empty argument vector");
  ProcessResult r;
  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  if (o.capture_stdout && pipe(out_pipe) != 0) {
    r.error = std::string("could not start '") + argv[0] + "': pipe: " + std::strerror(errno);
    return r;
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    r.error = std::string("could not start '") + argv[0] + "': pipe: " + std::strerror(errno);
    return r;
  }
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    r.error = std::string("could not start '") + argv[0] + "': fork: " + std::strerror(errno);
    return r;
  }
  if (pid == 0) {
    close(err_pipe[0]);
    if (out_pipe[0] >= 0) close(out_pipe[0]);
    exec_child(argv, o, out_pipe[1], err_pipe[1], parent);
  }
  register_child(pid);  // a SIGTERM/SIGINT to lmscale reaches it and waits for it (core/interrupt.h)
  close(err_pipe[1]);
  if (out_pipe[1] >= 0) close(out_pipe[1]);
  if (o.capture_stdout) {
    char buf[4096];
    std::string pending;
    ssize_t n;
    while ((n = read(out_pipe[0], buf, sizeof buf)) != 0) {
      if (n < 0) {
        if (errno == EINTR) continue;
        break;
      }
      r.output.append(buf, n);
      if (!o.on_line) continue;
      pending.append(buf, n);
      for (size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1))
        o.on_line(pending.substr(0, nl));
    }
    if (o.on_line && !pending.empty()) o.on_line(pending);
    close(out_pipe[0]);
  }
  std::string start_error;
  char buf[512];
  for (ssize_t n; (n = read(err_pipe[0], buf, sizeof buf)) > 0;) start_error.append(buf, n);
  close(err_pipe[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  unregister_child(pid);
  if (!start_error.empty()) {
    r.error = start_error;
    return r;
  }
  r.started = true;
  if (WIFSIGNALED(status)) r.term_signal = WTERMSIG(status);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

}  // namespace lmscale
