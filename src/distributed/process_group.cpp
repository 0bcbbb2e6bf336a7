// Rendezvous from torchrun's environment and construction of Gloo backends (NCCL lives in
// process_group_nccl.cpp so that only one translation unit pays for its headers).
#include "distributed/process_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>
#include <optional>

namespace lmscale::distributed {
namespace {

std::optional<std::string> get_env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

int env_int(const char* name, const std::string& value, int lo, int hi) {
  try {
    size_t used = 0;
    int v = std::stoi(value, &used);
    TORCH_CHECK(used == value.size(), "trailing characters");
    TORCH_CHECK(v >= lo && v <= hi, "out of range");
    return v;
  } catch (const std::exception&) {
    TORCH_CHECK(false, name, "=", value, " is not an integer in [", lo, ", ", hi,
                "]. Set it as torchrun does (e.g. ", name, "=0), or unset all of RANK/WORLD_SIZE to run alone.");
  }
  return 0;
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

}  // namespace

std::chrono::milliseconds collective_timeout_from_env() {
  auto v = get_env("LMSCALE_DIST_TIMEOUT_S");
  if (!v) return kDefaultCollectiveTimeout;
  return std::chrono::seconds(env_int("LMSCALE_DIST_TIMEOUT_S", *v, 1, 24 * 3600));
}

DistEnv env_from_environment() {
  DistEnv env;
  auto rank = get_env("RANK"), world = get_env("WORLD_SIZE");
  TORCH_CHECK(rank.has_value() == world.has_value(), "RANK is ", rank.value_or("unset"), " but WORLD_SIZE is ",
              world.value_or("unset"), ": set both (torchrun and `lmscale launch` do) or neither (single process).");
  if (!rank) return env;
  env.world_size = env_int("WORLD_SIZE", *world, 1, 1 << 20);
  env.rank = env_int("RANK", *rank, 0, env.world_size - 1);
  env.local_rank = env_int("LOCAL_RANK", get_env("LOCAL_RANK").value_or("0"), 0, 1 << 20);
  if (auto addr = get_env("MASTER_ADDR")) env.master_addr = *addr;
  if (auto port = get_env("MASTER_PORT")) env.master_port = env_int("MASTER_PORT", *port, 1, 65535);
  return env;
}

BackendKind parse_backend(const std::string& name) {
  if (name == "gloo") return BackendKind::Gloo;
  if (name == "nccl") return BackendKind::Nccl;
  TORCH_CHECK(false, "backend '", name, "' is not supported; choose gloo (CPU tensors) or nccl (CUDA tensors).");
  return BackendKind::Gloo;
}

std::string backend_name(BackendKind kind) { return kind == BackendKind::Gloo ? "gloo" : "nccl"; }

c10::intrusive_ptr<c10d::Store> connect_store(const DistEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(env.master_port);
  opts.isServer = env.rank == 0;
  opts.numWorkers = env.world_size;
  opts.waitWorkers = true;
  opts.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
}

Group make_group(BackendKind kind, const c10::intrusive_ptr<c10d::Store>& store, const DistEnv& env,
                 std::chrono::milliseconds timeout, const std::string& name) {
  Group g;
  g.kind = kind;
  g.rank = env.rank;
  g.world_size = env.world_size;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name + "/" + backend_name(kind), store);
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
    g.backend = make_nccl_backend(prefixed, env.rank, env.world_size, timeout);
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
  wait(group.backend->allreduce(tv, max_op));
  t = t.cpu();
  for (size_t i = 0; i < values.size(); ++i) values[i] = t[static_cast<int64_t>(i)].item<double>();
  return values;
}

void wait(const c10::intrusive_ptr<c10d::Work>& work) {
  TORCH_INTERNAL_ASSERT(work, "wait() on a null work handle");
  work->wait();
}

}  // namespace lmscale::distributed
