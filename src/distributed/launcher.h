// Local launcher: runs one command as N ranks on this machine (fork/exec, torchrun's environment
// variables per rank), prefixes every output line with its rank, and fails fast: when one rank
// exits non-zero the others are stopped and the first failure is returned. Rendezvous itself is
// process_group.h's job (the ranks meet through the TCPStore at MASTER_ADDR:MASTER_PORT).
#pragma once
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace lmscale::distributed {

struct LaunchOptions {
  int nproc = 2;                // ranks on this machine (torchrun's --nproc-per-node)
  int nnodes = 1;               // machines in the run; each runs one launcher with its own node_rank
  int node_rank = 0;            // this machine's index: its ranks are node_rank*nproc ... +nproc-1
  std::string master_addr = "127.0.0.1";
  int master_port = 0;          // 0: pick a free port on this machine (one node only)
  double grace_seconds = 3.0;   // after a failure: SIGTERM to the rest, SIGKILL this much later
  double timeout_seconds = 0;   // whole run; 0 = no limit. Exceeding it stops every rank (exit 124)
  std::map<std::string, std::string> extra_env;  // set in every rank, after the rank variables
};

// Called by `lmscale launch` and by the multi-process tests. argv[0] is looked up in PATH when it
// has no '/'. Each rank gets torchrun's variables: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// GROUP_RANK (= node_rank), MASTER_ADDR and MASTER_PORT; and OMP_NUM_THREADS=1 when the launcher's
// environment does not set it and several ranks share the machine (as torchrun does), announced
// in one line on `err`. Several nodes (nnodes > 1) need an explicit master_port and a master_addr
// that every node reaches; the store is served by global rank 0, on node 0. Rank output goes to `out` (stdout lines) and `err` (stderr lines), prefixed
// "[rank r] ". Returns 0 when every rank exits 0; otherwise the exit code of the first rank that
// failed (128 + signal if it was killed), after a one-line summary on `err`.
int launch_local(const std::vector<std::string>& argv, const LaunchOptions& options, std::ostream& out,
                 std::ostream& err);

// Checks nproc/nnodes/node_rank/master_port/master_addr/timeout, throwing UsageError naming the
// flag, the value, what is allowed and the fix.
void check_launch_options(const LaunchOptions& options);

// What the ranks would otherwise find out late (after a timeout, in a C++ stack trace), checked before
// any starts: --master-addr resolves; with one node it is an address of this machine (rank 0 serves
// the store there, and every rank is local); on node 0 an explicit --master-port is free there.
// Throws UsageError naming the flag and the fix. Binds sockets only locally (sends nothing).
void check_rendezvous(const LaunchOptions& options);

// A TCP port that was free a moment ago on `addr` (bind to port 0, read it back, close).
int pick_free_port(const std::string& addr = "127.0.0.1");

}  // namespace lmscale::distributed
