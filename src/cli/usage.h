// Usage errors and old spellings, in one place for every subcommand:
//  - deprecated flag names (--contexts, --precisions, --dtype, --modes, --impls, --seq, --compare)
//    and space-separated lists are rewritten to today's spelling with a one-line note each;
//  - a parse error becomes "lmscale: error: <what>", a "did you mean" for the nearest flag or
//    subcommand, the help command to run, and exit code 2;
//  - the nearest-word suggestion behind every "did you mean" (also used by the value validators).
#pragma once
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace lmscale::cli {

constexpr int kUsageExit = 2;

// Edit distance (a swap of neighbours costs 1), and the nearest of `candidates` to `word` (empty
// when none is close: at most a third of the word's length, at least 1, may differ). Behind every
// "did you mean": unknown flags and subcommands here, bad values in step_args.h's one_of.
size_t edit_distance(const std::string& a, const std::string& b);
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

// args excludes the program name. Stops at "--" (what follows belongs to another program).
// Notes go to stderr, once per old spelling.
std::vector<std::string> normalize_args(const std::vector<std::string>& args, const CLI::App& root);

// Prints the error (with a suggestion when one is found) and returns the exit code.
int report_parse_error(CLI::App& root, const std::vector<std::string>& args, const CLI::ParseError& e);

}  // namespace lmscale::cli
