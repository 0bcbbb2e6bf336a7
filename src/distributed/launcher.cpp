// fork/exec of N ranks with torchrun's environment, output relay with rank prefixes, and fail-fast
// supervision (first failure stops the rest). No libtorch: plain POSIX, so it also works when the
// ranks themselves crash inside libtorch.
#include "distributed/launcher.h"

#include <arpa/inet.h>
#include <c10/util/Exception.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <netdb.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/interrupt.h"

extern char** environ;

namespace lmscale::distributed {
namespace {

using Clock = std::chrono::steady_clock;

struct Rank {
  pid_t pid = -1;
  int fd[2] = {-1, -1};        // stdout, stderr read ends
  std::string partial[2];      // bytes after the last newline, per stream
  std::string last_err_line;   // repeated in the failure summary
  bool exited = false;
  int status = 0;
};

// Environment of one rank: the parent's, with the rank variables replaced.
std::vector<std::string> rank_environment(int local, const LaunchOptions& o, int port) {
  std::map<std::string, std::string> set = o.extra_env;
  set["RANK"] = std::to_string(o.node_rank * o.nproc + local);
  set["LOCAL_RANK"] = std::to_string(local);
  set["WORLD_SIZE"] = std::to_string(o.nnodes * o.nproc);
  set["LOCAL_WORLD_SIZE"] = std::to_string(o.nproc);
  set["GROUP_RANK"] = std::to_string(o.node_rank);
  set["ROLE_RANK"] = set["RANK"];
  set["MASTER_ADDR"] = o.master_addr;
  set["MASTER_PORT"] = std::to_string(port);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    if (!set.count(kv.substr(0, kv.find('=')))) env.push_back(kv);
  }
  for (auto& [k, v] : set) env.push_back(k + "=" + v);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

void relay(Rank& r, int rank, int stream, const char* data, size_t n, std::ostream& os) {
  std::string& buf = r.partial[stream];
  buf.append(data, n);
  size_t start = 0, nl;
  while ((nl = buf.find('\n', start)) != std::string::npos) {
    std::string line = buf.substr(start, nl - start);
    os << "[rank " << rank << "] " << line << "\n";
    if (stream == 1 && !line.empty()) r.last_err_line = line;
    start = nl + 1;
  }
  buf.erase(0, start);
  os.flush();
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe(int status) {
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  return "exit code " + std::to_string(exit_code(status));
}

}  // namespace

int pick_free_port(const std::string& addr) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  TORCH_CHECK(s >= 0, "socket() failed: ", std::strerror(errno));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  inet_pton(AF_INET, addr == "localhost" ? "127.0.0.1" : addr.c_str(), &sa.sin_addr);
  socklen_t len = sizeof(sa);
  bool ok = bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 &&
            getsockname(s, reinterpret_cast<sockaddr*>(&sa), &len) == 0;
  close(s);
  TORCH_CHECK(ok, "could not find a free port on ", addr, ": ", std::strerror(errno),
              ". Pass --master-port explicitly.");
  return ntohs(sa.sin_port);
}

void check_launch_options(const LaunchOptions& o) {
  auto refuse = [](const std::string& why) { throw UsageError("launch: " + why); };
  if (o.nproc < 1) refuse("-n " + std::to_string(o.nproc) + " is not a process count; pass 1 or more.");
  if (o.nnodes < 1) refuse("--nnodes " + std::to_string(o.nnodes) + " is not a node count; pass 1 or more.");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    refuse("--node-rank " + std::to_string(o.node_rank) + " is not in [0, " + std::to_string(o.nnodes) +
           "); number the machines 0 .. --nnodes - 1.");
  if (o.master_port < 0 || o.master_port > 65535)
    refuse("--master-port " + std::to_string(o.master_port) + " is not a TCP port; pass 1 .. 65535, or 0 to pick a "
           "free one.");
  if (o.master_addr.empty() || o.master_addr.find_first_not_of(" \t") == std::string::npos)
    refuse("--master-addr '" + o.master_addr + "' is empty; pass node 0's address (127.0.0.1, the default, on one "
           "machine).");
  if (!std::isfinite(o.timeout_seconds) || o.timeout_seconds < 0)
    refuse("--timeout " + std::to_string(o.timeout_seconds) + " is not a number of seconds; pass 0 (no limit) or "
           "more.");
  if (o.nnodes > 1 && o.master_port == 0)
    refuse("--nnodes " + std::to_string(o.nnodes) + " needs an explicit --master-port (the same on every node) and "
           "--master-addr set to node 0's address, e.g. lmscale launch --nnodes 2 --node-rank 0 -n 8 --master-addr "
           "10.0.0.1 --master-port 29500 -- bench ddp");
}

void check_rendezvous(const LaunchOptions& o) {
  const std::string& addr = o.master_addr;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(addr.c_str(), nullptr, &hints, &found); rc != 0)
    throw UsageError("launch: --master-addr " + addr + " does not resolve (" + gai_strerror(rc) + "): pass node 0's "
                     "address or a name this machine resolves" +
                     (o.nnodes == 1 ? " (with one node, leave it at 127.0.0.1)" : "") + ".");
  // Binding (never connecting) tells whether an address is this machine's, and whether a port is free.
  auto try_bind = [&](int port, int* err) {
    *err = EADDRNOTAVAIL;
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      sockaddr_storage sa{};
      std::memcpy(&sa, a->ai_addr, a->ai_addrlen);
      if (sa.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&sa)->sin_port = htons(static_cast<uint16_t>(port));
      if (sa.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port = htons(static_cast<uint16_t>(port));
      const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&sa), a->ai_addrlen) == 0;
      *err = ok ? 0 : errno;
      close(fd);
      if (ok) return true;
      if (*err == EADDRINUSE) return false;
    }
    return false;
  };
  int err = 0;
  const bool hosts_store = o.node_rank == 0;
  if (o.nnodes == 1 && !try_bind(0, &err) && err != EADDRINUSE) {
    freeaddrinfo(found);
    throw UsageError("launch: --master-addr " + addr + " is not an address of this machine (" + std::strerror(err) +
                     "): with one node every rank runs here and rank 0 serves the rendezvous store on that address; "
                     "leave --master-addr at 127.0.0.1.");
  }
  if (hosts_store && o.master_port > 0 && !try_bind(o.master_port, &err) && err == EADDRINUSE) {
    freeaddrinfo(found);
    throw UsageError("launch: --master-port " + std::to_string(o.master_port) + " is taken on " + addr +
                     " (another run or program listens there): pass another --master-port, or 0 to pick a free one.");
  }
  freeaddrinfo(found);
}

int launch_local(const std::vector<std::string>& argv, const LaunchOptions& given, std::ostream& out,
                 std::ostream& err) {
  TORCH_CHECK(!argv.empty(), "launch: no command given. Usage: lmscale launch -n 2 -- bench comm ...");
  check_launch_options(given);
  check_rendezvous(given);
  LaunchOptions o = given;
  // torchrun's rule: ranks sharing a machine each get one OpenMP thread unless the user chose, so N
  // CPU ranks do not each start one thread per core.
  const char* omp = std::getenv("OMP_NUM_THREADS");
  if (o.nproc > 1 && (omp == nullptr || *omp == '\0') && !o.extra_env.count("OMP_NUM_THREADS")) {
    o.extra_env["OMP_NUM_THREADS"] = "1";
    err << "lmscale launch: OMP_NUM_THREADS=1 in each of the " << o.nproc
        << " ranks (set OMP_NUM_THREADS to choose another value).\n";
  }
  const int port = o.master_port > 0 ? o.master_port : pick_free_port(o.master_addr);
  const pid_t parent = getpid();
  std::vector<Rank> ranks(o.nproc);
  for (int r = 0; r < o.nproc; ++r) {
    // Everything the child needs is built before fork: after fork only async-signal-safe calls.
    auto env = rank_environment(r, o, port);
    auto args = argv;
    auto c_env = c_strings(env), c_args = c_strings(args);
    int p_out[2], p_err[2];
    TORCH_CHECK(pipe2(p_out, O_CLOEXEC) == 0 && pipe2(p_err, O_CLOEXEC) == 0, "pipe2 failed: ", std::strerror(errno));
    pid_t pid = fork();
    TORCH_CHECK(pid >= 0, "fork failed: ", std::strerror(errno));
    if (pid == 0) {
      // A rank must not outlive its launcher (e.g. when a test runner kills it).
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      dup2(p_out[1], STDOUT_FILENO);
      dup2(p_err[1], STDERR_FILENO);
      execvpe(c_args[0], c_args.data(), c_env.data());
      const char msg[] = "launch: exec failed\n";
      ssize_t ignored = write(STDERR_FILENO, msg, sizeof(msg) - 1);
      (void)ignored;
      _exit(127);
    }
    close(p_out[1]);
    close(p_err[1]);
    ranks[r].pid = pid;
    register_child(pid);  // a SIGTERM/SIGINT to the launcher reaches every rank and waits for it (core/interrupt.h)
    ranks[r].fd[0] = p_out[0];
    ranks[r].fd[1] = p_err[0];
  }

  int first_failed = -1;
  bool timed_out = false;
  const auto start = Clock::now();
  Clock::time_point kill_at{};
  bool terminating = false;
  auto stop_others = [&] {
    if (terminating) return;
    terminating = true;
    for (auto& r : ranks)
      if (!r.exited) kill(r.pid, SIGTERM);
    kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.grace_seconds * 1000));
  };

  int running = o.nproc;
  char buf[65536];
  while (true) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int, int>> who;  // (rank, stream)
    for (int r = 0; r < o.nproc; ++r)
      for (int s = 0; s < 2; ++s)
        if (ranks[r].fd[s] >= 0) {
          fds.push_back({ranks[r].fd[s], POLLIN, 0});
          who.push_back({r, s});
        }
    if (fds.empty() && running == 0) break;
    const bool all_exited_before_poll = running == 0;
    if (!fds.empty()) {
      poll(fds.data(), fds.size(), 50);
    } else {
      usleep(20000);
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      auto [r, s] = who[i];
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        relay(ranks[r], o.node_rank * o.nproc + r, s, buf, static_cast<size_t>(n), s == 0 ? out : err);
      } else {
        if (!ranks[r].partial[s].empty()) relay(ranks[r], o.node_rank * o.nproc + r, s, "\n", 1, s == 0 ? out : err);
        close(ranks[r].fd[s]);
        ranks[r].fd[s] = -1;
      }
    }
    for (int r = 0; r < o.nproc; ++r) {
      if (ranks[r].exited) continue;
      int status = 0;
      if (waitpid(ranks[r].pid, &status, WNOHANG) == ranks[r].pid) {
        unregister_child(ranks[r].pid);
        ranks[r].exited = true;
        ranks[r].status = status;
        --running;
        if (exit_code(status) != 0 && first_failed < 0 && !terminating) {
          first_failed = r;
          stop_others();
        }
      }
    }
    if (all_exited_before_poll) {
      // Grandchildren may hold a pipe open; stop relaying once every rank had exited before a poll
      // that found nothing more to read.
      bool quiet = true;
      for (auto& f : fds) quiet = quiet && !(f.revents & POLLIN);
      if (quiet) break;
    }
    auto now = Clock::now();
    if (!terminating && o.timeout_seconds > 0 &&
        now - start > std::chrono::milliseconds(static_cast<int64_t>(o.timeout_seconds * 1000))) {
      timed_out = true;
      stop_others();
    }
    if (terminating && now > kill_at)
      for (auto& r : ranks)
        if (!r.exited) kill(r.pid, SIGKILL);
  }
  for (auto& r : ranks)
    for (int s = 0; s < 2; ++s)
      if (r.fd[s] >= 0) close(r.fd[s]);

  if (timed_out) {
    err << "lmscale launch: the run exceeded --timeout " << o.timeout_seconds << " s; stopped every rank.\n";
    return 124;
  }
  if (first_failed >= 0) {
    const Rank& f = ranks[first_failed];
    err << "lmscale launch: rank " << o.node_rank * o.nproc + first_failed << " failed first (" << describe(f.status)
        << ")";
    if (!f.last_err_line.empty()) err << ": " << f.last_err_line;
    err << "; stopped the other " << (o.nproc - 1) << " rank(s).\n";
    return exit_code(f.status);
  }
  return 0;
}

}  // namespace lmscale::distributed
