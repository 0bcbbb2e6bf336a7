// `lmscale info`: what this build holds and which GPUs it sees (core/build_info.h does the work).
#include <iostream>

#include "cli/registry.h"
#include "core/build_info.h"
#include "results/record.h"

LMSCALE_SUBCOMMAND("", "info", "what this build holds and which GPUs it sees", [](CLI::App& app) {
  app.footer("Example:\n  lmscale info");
  app.callback([] { lmscale::print_build_info(std::cout, lmscale::run_info().commit); });
});
