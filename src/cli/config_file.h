// `--config FILE.toml` for a subcommand (train, bench): the file's keys are the subcommand's long flags
// without the dashes (`steps = 2000`, `impl = ["lmscale", "torch-eager"]`, `resume = true`), a flag on
// the command line wins over the file, and the resolved configuration is written beside the records
// (config.toml) so that `--config <out>/config.toml` runs the same thing again. CLI11 reads TOML
// itself, but in 2.1.2 only for the top-level app, so a subcommand applies its file here, after parsing.
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "results/record.h"  // Json

namespace lmscale::cli {

// Adds `--config FILE` to `app`. Call once, with the other options.
void add_config_option(CLI::App& app);

// At the start of `app`'s callback: sets every option the command line left unset from the --config
// file (if one was given), validated as if typed. Throws CLI::ValidationError naming the file and the
// key that is unknown or in a [section] (the subcommands' files are flat), or CLI::FileError for a
// missing file. No-op without --config.
void apply_config_file(CLI::App& app);

// The resolved configuration as TOML: every option of `app` (given, from the file, or its default),
// with `resolved` overriding values that were chosen after parsing (the device's defaults), keys as the
// flags without dashes. For <out>/config.toml.
std::string resolved_config(const CLI::App& app, const Json& resolved);

}  // namespace lmscale::cli
