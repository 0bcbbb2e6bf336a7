// The `lmscale` CLI: builds the command tree from the registry (see registry.h), parses, runs the
// chosen subcommand, and turns library errors into one clear line and a non-zero exit.
#include <iostream>
#include <map>

#include "cli/registry.h"
#include "cli/usage.h"
#include "core/error.h"
#include "core/fault_injection.h"
#include "core/interrupt.h"
#include "model/config.h"
#include "results/record.h"

namespace lmscale::cli {
std::vector<Subcommand>& registry() {
  static std::vector<Subcommand> r;
  return r;
}
}  // namespace lmscale::cli

int main(int argc, char** argv) {
  using namespace lmscale::cli;
  // Named explicitly: usage lines say `lmscale bench`, not the binary's path.
  CLI::App app{"lmscale: where time and memory go in Transformer training, fast attention, data parallelism",
               "lmscale"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "lmscale " LMSCALE_VERSION);
  app.footer("Examples:\n  lmscale info\n  lmscale bench --size small --context 256,512\n"
             "  lmscale launch -n 2 -- bench ddp --size tiny\nRun `lmscale <subcommand> --help` for its options.");
  std::map<std::string, CLI::App*> apps{{"", &app}};
  // Parents before children: a path is registered only once its parent exists.
  auto pending = registry();
  while (!pending.empty()) {
    size_t before = pending.size();
    for (auto it = pending.begin(); it != pending.end();) {
      auto parent = apps.find(it->parent);
      if (parent == apps.end()) {
        ++it;
        continue;
      }
      CLI::App* sub = parent->second->add_subcommand(it->name, it->description);
      apps[(it->parent.empty() ? "" : it->parent + " ") + it->name] = sub;
      it->setup(*sub);
      it = pending.erase(it);
    }
    if (pending.size() == before) {
      std::cerr << "internal error: subcommand '" << pending.front().name << "' has unknown parent '"
                << pending.front().parent << "'\n";
      return 3;
    }
  }
  lmscale::set_run_command(argc, argv);
  lmscale::install_interrupt_handlers();  // SIGTERM/SIGINT: children waited for, temp files removed, one line
  // Old spellings become today's (with a note), so CLI11 sees one vocabulary.
  const std::vector<std::string> args = normalize_args(std::vector<std::string>(argv + 1, argv + argc), app);
  std::vector<char*> parsed_argv{argv[0]};
  for (const auto& s : args) parsed_argv.push_back(const_cast<char*>(s.c_str()));
  try {
    // The fault-injection settings are checked before anything runs (a typo would inject nothing).
    std::vector<std::string> sizes{"tiny", "custom"};
    for (const auto& n : lmscale::size_names()) sizes.push_back(n);
    lmscale::check_fault_injection(sizes);
    app.parse(static_cast<int>(parsed_argv.size()), parsed_argv.data());
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    return report_parse_error(app, args, e);
  } catch (const lmscale::UsageError& e) {  // a value the library refused: the flag, the allowed form, the fix
    std::cerr << "lmscale: error: " << e.what() << "\n";
    return kUsageExit;
  } catch (const std::exception& e) {
    std::cerr << "lmscale: error: " << lmscale::error_message(e) << "\n";
    return 1;
  }
  return 0;
}
