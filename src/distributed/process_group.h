// Rendezvous and process groups: reads torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT), meets the other ranks through a c10d TCPStore, and builds a Gloo (CPU
// tensors) or NCCL (CUDA tensors) backend with a collective timeout. Spawning ranks is launcher.h's job.
#pragma once
#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace lmscale::distributed {

// Collectives that do not finish within this time raise instead of hanging (a dead peer, or ranks
// that disagree on the sequence of collectives). LMSCALE_DIST_TIMEOUT_S overrides it.
constexpr std::chrono::seconds kDefaultCollectiveTimeout{300};
std::chrono::milliseconds collective_timeout_from_env();

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int local_world_size = 1;
  // torchrun's agent already serves a store at MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE
  // =True): every rank, rank 0 included, connects to it as a client, under /worker/attempt_<n>.
  bool use_agent_store = false;
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT
};

// Reads the torchrun variables. With none set, a single-process world (rank 0 of 1) is returned, so
// every distributed subcommand also runs alone. Partial or inconsistent settings throw, naming the
// variable, its value and the fix.
DistEnv env_from_environment();

// Distributed benchmarks compare processes: alone, they would time nothing and print nonsense
// bandwidths. Throws, saying how to start several, when env is a single-process world.
void require_several_ranks(const DistEnv& env, const std::string& command);

enum class BackendKind { Gloo, Nccl };
// "gloo" | "nccl"; throws listing them otherwise.
BackendKind parse_backend(const std::string& name);
std::string backend_name(BackendKind kind);

// One rank's view of a group: the c10d backend plus the device its tensors must live on (CPU for
// Gloo, cuda:LOCAL_RANK for NCCL).
struct Group {
  c10::intrusive_ptr<c10d::Backend> backend;
  // The rendezvous store under this group's prefix: ranks publish their progress there so that a
  // failed collective can say which ranks never arrived (fault.h).
  c10::intrusive_ptr<c10d::Store> store;
  BackendKind kind = BackendKind::Gloo;
  int rank = 0;
  int world_size = 1;
  c10::Device device = c10::Device("cpu");
};

// The TCPStore every group of this process shares: rank 0 serves it at MASTER_ADDR:MASTER_PORT, the
// others connect (waiting up to `timeout` for rank 0 to appear). Under torchrun's agent store every
// rank connects as a client. Rank 0's server listens only on MASTER_ADDR (loopback when every rank
// is local), not on every interface: see store_listen_socket.
c10::intrusive_ptr<c10d::Store> connect_store(const DistEnv& env, std::chrono::milliseconds timeout);

// A listening TCP socket bound to `addr` (resolved; "localhost" and 127.x give loopback) on `port`,
// for the TCPStore server to take over; -1 with `why` set when the address cannot be bound here
// (e.g. a load-balancer address), in which case the caller falls back to every interface.
int store_listen_socket(const std::string& addr, int port, std::string& why);

// NCCL knobs that trade communication speed for SMs and memory bandwidth left to the backward
// (which runs beside them): bounds on the CTAs NCCL launches per collective (its communicator config) and a
// high-priority communication stream. Zero / false keep NCCL's defaults. Ignored by Gloo.
struct NcclTuning {
  int max_ctas = 0;
  int min_ctas = 0;
  bool high_priority_stream = false;
};
// LMSCALE_NCCL_MAX_CTAS, LMSCALE_NCCL_MIN_CTAS, LMSCALE_NCCL_HIGH_PRIORITY=1.
NcclTuning nccl_tuning_from_env();
std::string describe(const NcclTuning& t);  // "default" or e.g. "max-ctas=4,high-priority"

// Builds one backend over `store`, under a key prefix `name` so that several groups (Gloo and NCCL in
// one benchmark) can share the store. Every rank must call this with the same name and kind.
Group make_group(BackendKind kind, const c10::intrusive_ptr<c10d::Store>& store, const DistEnv& env,
                 std::chrono::milliseconds timeout, const std::string& name = "default",
                 const NcclTuning& nccl = nccl_tuning_from_env());

// Built in process_group_nccl.cpp (the only file that includes the NCCL headers); throws on a
// build without CUDA.
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                     int world_size, std::chrono::milliseconds timeout,
                                                     const NcclTuning& tuning);

// Element-wise maximum over ranks (one small all-reduce on the group's device). Used to report
// the slowest rank's timings; also works as a barrier.
std::vector<double> max_over_ranks(const Group& group, std::vector<double> values);

// Blocks until the collective finished; a failure (timeout, dead peer) throws with the group named.
void wait(const c10::intrusive_ptr<c10d::Work>& work);

}  // namespace lmscale::distributed
