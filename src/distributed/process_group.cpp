// Rendezvous from torchrun's environment and construction of Gloo backends (NCCL lives in
// process_group_nccl.cpp so that only one translation unit pays for its headers).
#include "distributed/process_group.h"

#include "core/error.h"
#include "distributed/fault.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <c10/util/Logging.h>

#include <netdb.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>

namespace lmscale::distributed {
namespace {

std::optional<std::string> get_env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

// An integer environment variable in [lo, hi]; anything else is a usage error naming the variable,
// the allowed range and a value that is itself allowed (`fix`: how to set it, or what unsetting does).
int env_int(const char* name, const std::string& value, int lo, int hi, const std::string& fix) {
  size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || used == 0 || v < lo || v > hi)
    throw UsageError(std::string(name) + "=" + value + " is not a whole number in [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]: " + fix);
  return v;
}

// The fix for a rendezvous variable: torchrun's way, or none of them to run alone.
std::string rendezvous_fix(const char* name, int example) {
  return std::string("set it as torchrun does (e.g. ") + name + "=" + std::to_string(example) +
         "), or unset all of RANK/WORLD_SIZE to run alone";
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

}  // namespace

std::chrono::milliseconds collective_timeout_from_env() {
  auto v = get_env("LMSCALE_DIST_TIMEOUT_S");
  if (!v) return kDefaultCollectiveTimeout;
  return std::chrono::seconds(env_int("LMSCALE_DIST_TIMEOUT_S", *v, 1, 24 * 3600,
                                     "seconds a collective may take, e.g. LMSCALE_DIST_TIMEOUT_S=600; unset it for "
                                     "the default " + std::to_string(kDefaultCollectiveTimeout.count()) + " s"));
}

DistEnv env_from_environment() {
  DistEnv env;
  auto rank = get_env("RANK"), world = get_env("WORLD_SIZE");
  TORCH_CHECK(rank.has_value() == world.has_value(), "RANK is ", rank.value_or("unset"), " but WORLD_SIZE is ",
              world.value_or("unset"), ": set both (torchrun and `lmscale launch` do) or neither (single process).");
  if (!rank) return env;
  env.world_size = env_int("WORLD_SIZE", *world, 1, 1 << 20, rendezvous_fix("WORLD_SIZE", 2));
  env.rank = env_int("RANK", *rank, 0, env.world_size - 1, rendezvous_fix("RANK", 0));
  env.local_rank = env_int("LOCAL_RANK", get_env("LOCAL_RANK").value_or("0"), 0, 1 << 20, rendezvous_fix("LOCAL_RANK", 0));
  if (auto addr = get_env("MASTER_ADDR")) env.master_addr = *addr;
  if (auto port = get_env("MASTER_PORT")) env.master_port = env_int("MASTER_PORT", *port, 1, 65535, rendezvous_fix("MASTER_PORT", 29500));
  env.local_world_size = env_int("LOCAL_WORLD_SIZE", get_env("LOCAL_WORLD_SIZE").value_or("1"), 1, 1 << 20, rendezvous_fix("LOCAL_WORLD_SIZE", 2));
  env.use_agent_store = get_env("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
  env.restart_count = env_int("TORCHELASTIC_RESTART_COUNT", get_env("TORCHELASTIC_RESTART_COUNT").value_or("0"), 0,
                              1 << 20, rendezvous_fix("TORCHELASTIC_RESTART_COUNT", 0));
  return env;
}

void require_several_ranks(const DistEnv& env, const std::string& command) {
  TORCH_CHECK(env.world_size > 1, "`lmscale ", command, "` compares communication between processes, but this is ",
              "a single process (RANK/WORLD_SIZE are not set). Start several: `lmscale launch -n 2 -- ", command,
              " ...` on one machine, or `torchrun --nproc-per-node 2 --no-python lmscale ", command, " ...`.");
}

BackendKind parse_backend(const std::string& name) {
  if (name == "gloo") return BackendKind::Gloo;
  if (name == "nccl") return BackendKind::Nccl;
  TORCH_CHECK(false, "backend '", name, "' is not supported; choose gloo (CPU tensors) or nccl (CUDA tensors).");
  return BackendKind::Gloo;
}

std::string backend_name(BackendKind kind) { return kind == BackendKind::Gloo ? "gloo" : "nccl"; }

int store_listen_socket(const std::string& addr, int port, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string host = addr == "localhost" ? "127.0.0.1" : addr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    why = std::string("cannot resolve ") + addr + ": " + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 2048) != 0) {
      why = std::string("cannot listen on ") + addr + ":" + std::to_string(port) + ": " + std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  return fd;
}

namespace {

// The TCPStore, with its failures said in a few lines naming the address, the port, the flags and
// the variable that sets the wait, instead of c10d's exception (a C++ stack trace).
c10::intrusive_ptr<c10d::Store> open_store(const DistEnv& env, const c10d::TCPStoreOptions& opts,
                                           std::chrono::milliseconds timeout) {
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  // A name that does not resolve fails now, not after the timeout.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(env.master_addr.c_str(), nullptr, &hints, &found); rc != 0)
    throw UsageError("rank " + std::to_string(env.rank) + ": MASTER_ADDR " + env.master_addr + " does not resolve (" +
                     gai_strerror(rc) + "): pass node 0's address (`lmscale launch --master-addr`, torchrun's "
                     "--master-addr)");
  freeaddrinfo(found);
  // c10d logs every failed connect attempt with its exception's C++ stack trace (LOG(ERROR), 20
  // lines a try): while the store connects, c10's log level is raised so that the one message below
  // is what a user reads.
  struct QuietC10dLog {
    int saved = FLAGS_caffe2_log_level;
    QuietC10dLog() { FLAGS_caffe2_log_level = 3; }  // FATAL only
    ~QuietC10dLog() { FLAGS_caffe2_log_level = saved; }
  } quiet;
  try {
    return c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
  } catch (const std::exception& e) {
    std::string cause = e.what();
    if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) cause = ce->msg();
    cause = cause.substr(0, cause.find('\n'));
    const long seconds = static_cast<long>(timeout.count() / 1000);
    TORCH_CHECK(false, "rank ", env.rank, " of ", env.world_size, ": ",
                opts.isServer ? "could not serve" : "could not reach", " the rendezvous store at ", where, " within ",
                seconds, " s (", cause, "). Check --master-addr (node 0's address, reachable from this machine) "
                "and --master-port (the same on every node), and that node 0's launcher (--node-rank 0) is running; "
                "to wait longer, set LMSCALE_DIST_TIMEOUT_S (now ", seconds, " s).");
  }
  return {};
}

}  // namespace

c10::intrusive_ptr<c10d::Store> connect_store(const DistEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(env.master_port);
  opts.timeout = timeout;
  if (env.use_agent_store) {
    // torchrun's agent serves the store on this address already: starting a second server there is
    // what printed "The server socket has failed to bind". Connect, under the agent's prefix.
    // The agent is this process's parent: when it dies (killed, so it cannot stop its workers) the
    // store dies with it and every later store write fails, so this rank gets SIGTERM and stops as a
    // SIGTERM stops it (core/interrupt.h: the cell in progress is not recorded), never an orphan
    // recording a slowed step as a clean measurement. An agent already gone: stop now.
    const pid_t agent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != agent) raise(SIGTERM);
    opts.isServer = false;
    opts.waitWorkers = false;
    auto client = open_store(env, opts, timeout);
    return c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(env.restart_count), client);
  }
  opts.isServer = env.rank == 0;
  opts.numWorkers = env.world_size;
  opts.waitWorkers = true;
  if (opts.isServer) {
    // c10d's TCPStore binds every interface; given a socket it serves on that one instead. Bound to
    // MASTER_ADDR (loopback when every rank is local), the store, which accepts any key from anyone
    // who connects, is not reachable from other machines.
    std::string why;
    const int fd = store_listen_socket(env.master_addr, env.master_port, why);
    if (fd < 0 && why.find(std::strerror(EADDRINUSE)) != std::string::npos)
      throw UsageError("rank 0: the rendezvous port " + std::to_string(env.master_port) + " is taken on " +
                       env.master_addr + " (another run or program listens there): pass another --master-port, or 0 "
                       "to pick a free one (torchrun: --master-port)");
    if (fd >= 0)
      opts.masterListenFd = fd;
    else
      std::cerr << "lmscale: warning: the rendezvous store listens on every interface (" << why
                << "); restrict port " << env.master_port << " with a firewall, or set MASTER_ADDR to an address "
                << "of this machine.\n";
  }
  return open_store(env, opts, timeout);
}

NcclTuning nccl_tuning_from_env() {
  NcclTuning t;
  if (auto v = get_env("LMSCALE_NCCL_MAX_CTAS")) t.max_ctas = env_int("LMSCALE_NCCL_MAX_CTAS", *v, 0, 1024, "e.g. LMSCALE_NCCL_MAX_CTAS=16; 0 or unset leaves it to NCCL");
  if (auto v = get_env("LMSCALE_NCCL_MIN_CTAS")) t.min_ctas = env_int("LMSCALE_NCCL_MIN_CTAS", *v, 0, 1024, "e.g. LMSCALE_NCCL_MIN_CTAS=4; 0 or unset leaves it to NCCL");
  if (auto v = get_env("LMSCALE_NCCL_HIGH_PRIORITY")) t.high_priority_stream = env_int("LMSCALE_NCCL_HIGH_PRIORITY", *v, 0, 1, "1 for a high-priority stream, 0 or unset for a normal one") == 1;
  TORCH_CHECK(t.min_ctas == 0 || t.max_ctas == 0 || t.min_ctas <= t.max_ctas, "NCCL min CTAs ", t.min_ctas,
              " exceed max CTAs ", t.max_ctas, "; lower the minimum or raise the maximum.");
  return t;
}

std::string describe(const NcclTuning& t) {
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : ",") + part; };
  if (t.max_ctas > 0) add("max-ctas=" + std::to_string(t.max_ctas));
  if (t.min_ctas > 0) add("min-ctas=" + std::to_string(t.min_ctas));
  if (t.high_priority_stream) add("high-priority");
  return s.empty() ? "default" : s;
}

Group make_group(BackendKind kind, const c10::intrusive_ptr<c10d::Store>& store, const DistEnv& env,
                 std::chrono::milliseconds timeout, const std::string& name, const NcclTuning& nccl) {
  Group g;
  g.kind = kind;
  g.rank = env.rank;
  g.world_size = env.world_size;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name + "/" + backend_name(kind), store);
  g.store = c10::make_intrusive<c10d::PrefixStore>(name + "/" + backend_name(kind) + "/progress", store);
  if (kind == BackendKind::Gloo) {
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    // Loopback when every rank is on this machine: resolving the hostname may give an address the
    // container cannot bind. GLOO_SOCKET_IFNAME (as in PyTorch) picks an interface explicitly.
    if (auto ifname = get_env("GLOO_SOCKET_IFNAME"))
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(*ifname));
    else if (is_loopback(env.master_addr))
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    else
      opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    g.backend = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, env.rank, env.world_size, opts);
    g.device = c10::Device("cpu");
  } else {
    g.backend = make_nccl_backend(prefixed, env.rank, env.world_size, timeout, nccl);
    g.device = c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(env.local_rank));
  }
  return g;
}

std::vector<double> max_over_ranks(const Group& group, std::vector<double> values) {
  if (values.empty()) return values;
  at::Tensor t = at::tensor(values, at::kDouble).to(group.device);
  std::vector<at::Tensor> tv{t};
  c10d::AllreduceOptions max_op;
  max_op.reduceOp = c10d::ReduceOp::MAX;
  wait_explained(group.backend->allreduce(tv, max_op), group, "statistics", "all-reduce (max) of per-rank values", -1);
  t = t.cpu();
  for (size_t i = 0; i < values.size(); ++i) values[i] = t[static_cast<int64_t>(i)].item<double>();
  return values;
}

void wait(const c10::intrusive_ptr<c10d::Work>& work) {
  TORCH_INTERNAL_ASSERT(work, "wait() on a null work handle");
  work->wait();
}

}  // namespace lmscale::distributed
