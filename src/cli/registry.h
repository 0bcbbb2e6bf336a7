// Subcommand registry: each src/cli/<name>.cpp registers itself with LMSCALE_SUBCOMMAND, so adding a
// subcommand never touches main.cpp. A subcommand's setup() adds its options to the CLI11 app and
// sets the app's callback; it may nest under a parent ("bench attention" has parent "bench").
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace lmscale::cli {

struct Subcommand {
  std::string parent;  // "" for top level
  std::string name;
  std::string description;
  std::function<void(CLI::App&)> setup;
};

std::vector<Subcommand>& registry();

struct Registrar {
  Registrar(std::string parent, std::string name, std::string description, std::function<void(CLI::App&)> setup) {
    registry().push_back({std::move(parent), std::move(name), std::move(description), std::move(setup)});
  }
};

}  // namespace lmscale::cli

#define LMSCALE_CLI_CONCAT2(a, b) a##b
#define LMSCALE_CLI_CONCAT(a, b) LMSCALE_CLI_CONCAT2(a, b)
// LMSCALE_SUBCOMMAND("bench", "attention", "FlashAttention benchmark", [](CLI::App& app) {...});
// Variadic so that commas inside the setup lambda (captures, initialisers) need no extra parentheses.
#define LMSCALE_SUBCOMMAND(parent, name, description, ...)                                            \
  static ::lmscale::cli::Registrar LMSCALE_CLI_CONCAT(lmscale_cli_registrar_, __LINE__)(parent, name, \
                                                                                      description, __VA_ARGS__)
