// --config files for subcommands; see config_file.h.
#include "cli/config_file.h"

#include <filesystem>
#include <map>
#include <sstream>

namespace lmscale::cli {

namespace {

constexpr char kConfigFlag[] = "--config";

// A JSON scalar or array as a TOML value: JSON's strings, numbers, booleans and arrays are TOML's too.
std::string toml_value(const Json& v) {
  if (v.is_array() && v.size() == 1) return v[0].dump();  // one value: as CLI11 writes it
  return v.dump();
}

}  // namespace

void add_config_option(CLI::App& app) {
  app.add_option(kConfigFlag, "a TOML file of options (keys: the long flags without --, e.g. steps = 2000); flags "
                              "on the command line win; the resolved configuration is written to <out>/config.toml")
      ->configurable(false);  // a missing file is apply_config_file's message (so `--help` parses any path)
}

void apply_config_file(CLI::App& app) {
  const CLI::Option* config = app.get_option(kConfigFlag);
  if (config->empty()) return;
  const std::string path = config->as<std::string>();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw CLI::ValidationError(kConfigFlag, path + ": no such file; pass a TOML file of options (a run's resolved "
                                                   "one is <out>/config.toml)");
  CLI::ConfigTOML toml;
  for (const CLI::ConfigItem& item : toml.from_file(path)) {
    if (item.name == "++" || item.name == "--") continue;  // section markers
    if (!item.parents.empty())
      throw CLI::ValidationError(kConfigFlag, path + ": [" + item.parents.front() + "] sections are not read: put " +
                                                  item.name + " = ... at the top of the file");
    CLI::Option* op = app.get_option_no_throw("--" + item.name);
    if (op == nullptr || !op->get_configurable())
      throw CLI::ValidationError(kConfigFlag, path + ": " + item.name + " is not an option of `lmscale " +
                                                  app.get_name() + "` (keys are its long flags without --; see " +
                                                  "lmscale " + app.get_name() + " --help)");
    if (!op->empty()) continue;  // given on the command line: it wins
    if (op->get_expected_min() == 0) {
      op->add_result(op->get_flag_value(item.name, toml.to_flag(item)));
    } else {
      op->add_result(item.inputs);
    }
    op->run_callback();  // validates the value as if typed, and sets the variable behind the option
  }
}

std::string resolved_config(const CLI::App& app, const Json& resolved) {
  std::ostringstream out;
  out << "# lmscale " << app.get_name() << ": the resolved configuration of this run (`lmscale " << app.get_name()
      << " --config THIS_FILE` runs it again)\n";
  std::map<std::string, bool> written;
  // CLI11's own writer for the options as parsed; keys with a '.' are nested subcommands' and are left out.
  std::istringstream lines(app.config_to_str(/*default_also=*/true, /*write_description=*/false));
  // CLI11 2.1 writes `key=value` (later versions `key = value`): split at the first '=' and trim.
  auto trim = [](std::string t) {
    const auto a = t.find_first_not_of(' '), z = t.find_last_not_of(' ');
    return a == std::string::npos ? std::string() : t.substr(a, z - a + 1);
  };
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    if (eq == std::string::npos || line.empty() || line[0] == '[' || line[0] == '#') continue;
    const std::string key = trim(line.substr(0, eq));
    if (key.find('.') != std::string::npos || key == "help" || key == "config") continue;
    // An option left at no default is written "" by CLI11, which its own check refuses when read back: leave it out.
    if (!resolved.contains(key) && trim(line.substr(eq + 1)) == "\"\"") continue;
    out << key << " = " << (resolved.contains(key) ? toml_value(resolved[key]) : trim(line.substr(eq + 1))) << "\n";
    written[key] = true;
  }
  for (const auto& [key, v] : resolved.items())
    if (!written.count(key)) out << key << " = " << toml_value(v) << "\n";
  return out.str();
}

}  // namespace lmscale::cli
