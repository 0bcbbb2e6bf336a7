// Old spellings and usage errors (see usage.h).
#include "cli/usage.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <set>

namespace lmscale::cli {

// Optimal string alignment: insertions, deletions, substitutions and swaps of two neighbours
// ("benhc" is one swap from "bench") each cost 1.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(1, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best;
}

namespace {

// Old flag → today's flag. Kept for one release (0.2 drops them).
const std::map<std::string, std::string>& renamed_flags() {
  static const std::map<std::string, std::string> m{
      {"--contexts", "--context"}, {"--seq", "--context"},  {"--precisions", "--precision"},
      {"--dtype", "--precision"},  {"--modes", "--mode"},   {"--impls", "--impl"},
      {"--compare", "--impl"},     {"--sizes", "--size"},
  };
  return m;
}

// Flags that take a comma list in at least one subcommand (space lists are the old syntax).
const std::set<std::string>& list_flags() {
  static const std::set<std::string> s{"--size",    "--context", "--precision", "--mode",     "--attention",
                                       "--impl",    "--head-dim", "--backend",  "--ops",      "--sizes-mb",
                                       "--bucket-mb", "--trace-impls"};
  return s;
}

void collect_subcommand_names(const CLI::App& app, std::set<std::string>* names) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names->insert(sub->get_name());
    collect_subcommand_names(*sub, names);
  }
}

bool is_flag(const std::string& t) {
  if (t.size() < 2 || t[0] != '-') return false;
  return !(std::isdigit(static_cast<unsigned char>(t[1])) || t[1] == '.');  // -1, -.5 are values
}

const CLI::App* find_subcommand(const CLI::App& app, const std::string& name) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    if (sub->get_name() == name) return sub;
  return nullptr;
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> v;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) v.push_back(sub->get_name());
  return v;
}

std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> v;
  for (const CLI::Option* o : app.get_options()) {
    for (const auto& l : o->get_lnames()) v.push_back("--" + l);
    for (const auto& s : o->get_snames()) v.push_back("-" + s);
  }
  return v;
}

const CLI::Option* find_option(const CLI::App& app, const std::string& name) {
  for (const CLI::Option* o : app.get_options()) {
    for (const auto& l : o->get_lnames())
      if (name == "--" + l) return o;
    for (const auto& s : o->get_snames())
      if (name == "-" + s) return o;
  }
  return nullptr;
}

bool has_positional(const CLI::App& app) {
  for (const CLI::Option* o : app.get_options())
    if (o->get_positional()) return true;
  return false;
}

std::string path_of(const std::vector<const CLI::App*>& chain) {
  std::string s = "lmscale";
  for (size_t i = 1; i < chain.size(); ++i) s += " " + chain[i]->get_name();
  return s;
}

struct Diagnosis {
  std::vector<const CLI::App*> chain;
  std::string problem, suggestion;
  bool dashdash = false;
  size_t first_positional = std::string::npos;  // index in args of the first positional value
};

// Walks the arguments as CLI11 would, stopping at the first token nothing accepts.
Diagnosis diagnose(const CLI::App& root, const std::vector<std::string>& args) {
  Diagnosis d;
  d.chain.push_back(&root);
  for (size_t i = 0; i < args.size(); ++i) {
    const CLI::App& cur = *d.chain.back();
    const std::string& t = args[i];
    if (t == "--") {
      d.dashdash = true;
      break;
    }
    if (is_flag(t)) {
      const bool long_form = t.rfind("--", 0) == 0;
      const std::string name = long_form ? t.substr(0, t.find('=')) : t.substr(0, 2);
      const CLI::Option* o = find_option(cur, name);
      if (!o) {
        d.problem = "`" + path_of(d.chain) + "` has no option " + name;
        const std::string near = nearest(name, option_names(cur));
        if (!near.empty()) d.suggestion = "did you mean " + near + "?";
        return d;
      }
      const bool attached = long_form ? t.find('=') != std::string::npos : t.size() > 2;
      if (o->get_items_expected_max() > 0 && !attached && i + 1 < args.size()) ++i;
      continue;
    }
    if (const CLI::App* sub = find_subcommand(cur, t)) {
      d.chain.push_back(sub);
      continue;
    }
    if (has_positional(cur)) {
      if (d.first_positional == std::string::npos) d.first_positional = i;
      continue;
    }
    const auto subs = subcommand_names(cur);
    if (!subs.empty()) {
      d.problem = "'" + t + "' is not a subcommand of `" + path_of(d.chain) + "`";
      const std::string near = nearest(t, subs);
      d.suggestion = near.empty() ? "subcommands: " + [&] {
        std::string s;
        for (const auto& n : subs) s += (s.empty() ? "" : ", ") + n;
        return s;
      }()
                                  : "did you mean `" + path_of(d.chain) + " " + near + "`?";
    } else {
      d.problem = "`" + path_of(d.chain) + "` takes no argument '" + t + "'";
    }
    return d;
  }
  return d;
}

}  // namespace

std::vector<std::string> normalize_args(const std::vector<std::string>& args, const CLI::App& root) {
  std::set<std::string> subs;
  collect_subcommand_names(root, &subs);
  std::set<std::string> noted;
  auto note = [&](const std::string& key, const std::string& text) {
    if (noted.insert(key).second) std::cerr << "lmscale: note: " << text << "\n";
  };
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string t = args[i];
    if (t == "--") {  // the rest belongs to the launched program, which normalizes its own
      out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    if (t.rfind("--", 0) != 0) {
      out.push_back(t);
      continue;
    }
    const size_t eq = t.find('=');
    std::string name = t.substr(0, eq);
    if (auto r = renamed_flags().find(name); r != renamed_flags().end()) {
      note(name, name + " is deprecated: write " + r->second + " (the old spelling goes in the next release)");
      name = r->second;
      t = name + (eq == std::string::npos ? "" : t.substr(eq));
    }
    if (!list_flags().count(name) || eq != std::string::npos) {
      out.push_back(t);
      continue;
    }
    // --context 128 256 → --context 128,256
    std::string value;
    size_t n = 0;
    while (i + 1 < args.size() && !is_flag(args[i + 1]) && args[i + 1] != "--" && !subs.count(args[i + 1])) {
      value += (n++ ? "," : "") + args[++i];
    }
    out.push_back(t);
    if (n) out.push_back(value);
    if (n > 1)
      note("space:" + name, "space-separated lists are deprecated: write " + name + " " + value +
                                " (the old syntax goes in the next release)");
  }
  return out;
}

int report_parse_error(CLI::App& root, const std::vector<std::string>& args, const CLI::ParseError& e) {
  const Diagnosis d = diagnose(root, args);
  const std::string where = path_of(d.chain);
  std::string problem = d.problem, suggestion = d.suggestion;
  if (problem.empty()) {
    problem = e.what();
    if (dynamic_cast<const CLI::RequiredError*>(&e) && problem.find("subcommand") != std::string::npos) {
      const auto subs = subcommand_names(*d.chain.back());
      problem = "`" + where + "` needs a subcommand";
      std::string s;
      for (const auto& n : subs) s += (s.empty() ? "" : ", ") + n;
      suggestion = "one of: " + s;
    }
  }
  // `launch -n 2 bench comm --backend gloo`: the program's own flags reached launch.
  if (d.chain.back()->get_name() == "launch" && !d.dashdash &&
      (!d.problem.empty() || dynamic_cast<const CLI::ExtrasError*>(&e))) {
    std::string fixed = "lmscale";
    for (size_t i = 0; i < args.size(); ++i) {
      if (i == d.first_positional) fixed += " --";
      fixed += " " + args[i];
    }
    suggestion = "put `--` before the program's arguments: " + fixed;
  }
  std::cerr << "lmscale: error: " << problem << "\n";
  if (!suggestion.empty()) std::cerr << "  " << suggestion << "\n";
  std::cerr << "Run `" << where << " --help` for the options.\n";
  return kUsageExit;
}

}  // namespace lmscale::cli
