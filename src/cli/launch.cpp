// `lmscale launch -n N -- <subcommand ...>`: runs a subcommand of this same binary as N local ranks
// (see dist/launcher.h for the supervision rules). Multi-node runs use torchrun/srun instead: the
// ranks read the same environment variables.
#include <unistd.h>

#include <climits>
#include <iostream>

#include "cli/registry.h"
#include "distributed/launcher.h"

namespace {

std::string self_executable() {
  char path[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  TORCH_CHECK(n > 0, "launch: cannot read /proc/self/exe to re-run this binary; pass --program PATH.");
  return std::string(path, static_cast<size_t>(n));
}

}  // namespace

LMSCALE_SUBCOMMAND("", "launch", "run a subcommand as N local ranks (torchrun-style env, fail-fast)",
                   [](CLI::App& app) {
  struct Args {
    lmscale::distributed::LaunchOptions opts;
    std::string program;
    std::vector<std::string> command;
  };
  auto a = std::make_shared<Args>();
  app.add_option("-n,--nproc,--nproc-per-node", a->opts.nproc,
                 "number of ranks (processes) on this machine (--nproc-per-node: torchrun's spelling)")
      ->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--nnodes", a->opts.nnodes, "machines in the run (each runs this command with its --node-rank)")
      ->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--node-rank", a->opts.node_rank, "this machine's index, 0 .. --nnodes - 1")->capture_default_str();
  app.add_option("--master-addr", a->opts.master_addr, "rendezvous address (TCPStore on rank 0)")
      ->capture_default_str();
  app.add_option("--master-port", a->opts.master_port, "rendezvous port; 0 picks a free one")
      ->capture_default_str();
  app.add_option("--timeout", a->opts.timeout_seconds, "stop every rank after this many seconds (0: never)")
      ->capture_default_str();
  app.add_option("--program", a->program, "executable to run instead of this lmscale binary");
  app.add_option("command", a->command, "the subcommand and its options, after --")->required();
  app.footer("The program's own arguments go after `--`.\nExamples:\n  lmscale launch -n 2 -- bench comm --backend gloo\n"
             "  lmscale launch --nproc-per-node 2 -- bench ddp --size tiny\n"
             "Several machines: run `lmscale launch --nnodes 2 --node-rank R -n 8 --master-addr NODE0 --master-port "
             "29500 -- ...` on each (or torchrun --nnodes 2 --node-rank R --nproc-per-node 8 --master-addr NODE0 "
             "--no-python lmscale ...). Collectives time out after LMSCALE_DIST_TIMEOUT_S seconds (default 300).");
  app.callback([a] {
    std::vector<std::string> argv = a->command;
    argv.insert(argv.begin(), a->program.empty() ? self_executable() : a->program);
    int rc = lmscale::distributed::launch_local(argv, a->opts, std::cout, std::cerr);
    if (rc != 0) std::exit(rc);
  });
});
