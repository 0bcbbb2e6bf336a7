// `lmscale launch -n N -- <subcommand ...>`: runs a subcommand of this same binary as N local ranks
// (see dist/launcher.h for the supervision rules). Multi-node runs use torchrun/srun instead: the
// ranks read the same environment variables.
#include <unistd.h>

#include <climits>
#include <iostream>

#include "bench/ddp_bench.h"
#include "cli/registry.h"
#include "cli/step_args.h"
#include "core/error.h"
#include "distributed/launch_fit.h"
#include "distributed/launcher.h"
#include "model/config.h"

namespace {

// The model's parameter count when the launched command names a size (the first of a --size list),
// else the default size of bench ddp/zero for those, else 0: what the memory estimate scales with.
int64_t params_of(const std::vector<std::string>& command) {
  std::string size;
  for (size_t i = 0; i + 1 < command.size(); ++i)
    if (command[i] == "--size") size = command[i + 1].substr(0, command[i + 1].find(','));
  for (const auto& word : command)
    if (word.rfind("--size=", 0) == 0) size = word.substr(7, word.find(',') == std::string::npos ? std::string::npos : word.find(',') - 7);
  const bool ddp_or_zero = command.size() >= 2 && command[0] == "bench" && (command[1] == "ddp" || command[1] == "zero");
  if (size.empty() && ddp_or_zero) size = lmscale::distributed_bench_step().model.name;
  if (size.empty() || size == "custom") return 0;
  try {
    return lmscale::model_config(size).param_count();
  } catch (const std::exception&) {
    return 0;  // not a size: the command itself will say so
  }
}

// Whether the ranks will run on GPUs: there are GPUs and the command does not ask for the CPU.
bool runs_on_gpus(const std::vector<std::string>& command, int gpus) {
  if (gpus == 0) return false;
  for (size_t i = 0; i + 1 < command.size(); ++i)
    if ((command[i] == "--device" && command[i + 1] == "cpu") || (command[i] == "--backend" && command[i + 1] == "gloo"))
      return false;
  return true;
}

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
    bool oversubscribe = false;
  };
  auto a = std::make_shared<Args>();
  app.add_option("-n,--nproc,--nproc-per-node", a->opts.nproc,
                 "number of ranks (processes) on this machine (--nproc-per-node: torchrun's spelling)")
      ->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--nnodes", a->opts.nnodes, "machines in the run (each runs this command with its --node-rank)")
      ->check(lmscale::cli::whole_in(1, 1 << 16))->capture_default_str();
  app.add_option("--node-rank", a->opts.node_rank, "this machine's index, 0 .. --nnodes - 1")
      ->check(lmscale::cli::whole_in(0, (1 << 16) - 1))->capture_default_str();
  app.add_option("--master-addr", a->opts.master_addr, "rendezvous address (TCPStore on rank 0)")
      ->capture_default_str();
  app.add_option("--master-port", a->opts.master_port, "rendezvous port; 0 picks a free one")
      ->check(lmscale::cli::whole_in(0, 65535))->capture_default_str();
  app.add_option("--timeout", a->opts.timeout_seconds, "stop every rank after this many seconds (0: never)")
      ->check(lmscale::cli::at_least(0))->capture_default_str();
  app.add_option("--program", a->program, "executable to run instead of this lmscale binary");
  app.add_option("command", a->command, "the subcommand and its options, after --")->required();
  app.add_flag(lmscale::distributed::kOversubscribeFlag, a->oversubscribe,
               "launch even when the ranks do not fit this machine's cores or memory (checked before any rank starts)");
  app.footer("The program's own arguments go after `--`.\nExamples:\n  lmscale launch -n 2 -- bench comm --backend gloo\n"
             "  lmscale launch --nproc-per-node 2 -- bench ddp --size tiny\n"
             "Several machines: run `lmscale launch --nnodes 2 --node-rank R -n 8 --master-addr NODE0 --master-port "
             "29500 -- ...` on each (or torchrun --nnodes 2 --node-rank R --nproc-per-node 8 --master-addr NODE0 "
             "--no-python lmscale ...). Collectives time out after LMSCALE_DIST_TIMEOUT_S seconds (default 300).");
  app.callback([a] {
    using namespace lmscale::distributed;
    // Every launch option, and the rendezvous address and port, checked before any rank starts (exit 2).
    lmscale::check_as_usage([&] { check_launch_options(a->opts); });
    check_rendezvous(a->opts);
    const Machine machine = this_machine();
    const LaunchRequest request{a->opts.nproc, params_of(a->command), runs_on_gpus(a->command, machine.gpus)};
    const FitVerdict fit = check_launch_fit(request, machine);
    if (!fit.refusal.empty() && !a->oversubscribe) throw lmscale::UsageError(fit.refusal);
    if (!fit.refusal.empty()) std::cerr << "lmscale launch: " << kOversubscribeFlag << ": " << fit.refusal << "\n";
    if (!fit.warning.empty()) std::cerr << fit.warning << "\n";
    std::vector<std::string> argv = a->command;
    argv.insert(argv.begin(), a->program.empty() ? self_executable() : a->program);
    int rc = lmscale::distributed::launch_local(argv, a->opts, std::cout, std::cerr);
    if (rc != 0) std::exit(rc);
  });
});
