// Finding the interpreter and lmscale's Python package; see python_module.h.
#include "core/python_module.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace lmscale {
namespace fs = std::filesystem;
namespace {

bool holds_package(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "lmscale" / "__init__.py", ec);
}

// The python/ folder of a checkout that `dir` is in or beside (build/, build-gpu/, the root itself).
std::string near(const fs::path& dir) {
  fs::path d = dir;
  for (int up = 0; up < 3 && !d.empty(); ++up, d = d.parent_path()) {
    if (holds_package(d / "python")) return (d / "python").string();
    if (d == d.parent_path()) break;
  }
  return "";
}

// The python/ folder of the source tree a CMake build folder was configured from.
std::string from_build_tree(const fs::path& build_dir) {
  std::ifstream cache(build_dir / "CMakeCache.txt");
  const std::string key = "CMAKE_HOME_DIRECTORY:INTERNAL=";
  for (std::string line; std::getline(cache, line);)
    if (line.rfind(key, 0) == 0) {
      const fs::path python = fs::path(line.substr(key.size())) / "python";
      return holds_package(python) ? python.string() : "";
    }
  return "";
}

std::string find_package_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const fs::path dir = exe.parent_path();
  if (std::string found = near(dir); !found.empty()) return found;
  return from_build_tree(dir);
}

}  // namespace

std::string python_interpreter() {
  const char* p = std::getenv("LMSCALE_PYTHON");
  return p && *p ? p : "python3";
}

std::string python_package_dir() {
  static const std::string dir = find_package_dir();
  return dir;
}

std::vector<std::string> python_module_argv(const std::string& module, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {python_interpreter(), "-m", module};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

ProcessOptions python_module_options(ProcessOptions options) {
  const std::string dir = python_package_dir();
  if (dir.empty()) return options;
  const char* prev = std::getenv("PYTHONPATH");
  options.env.emplace_back("PYTHONPATH", prev && *prev ? dir + ":" + prev : dir);
  return options;
}

std::string python_fix() {
  return "set LMSCALE_PYTHON to an interpreter that has torch 2.11 (now: " + python_interpreter() +
         (python_package_dir().empty() ? "; lmscale's python/ folder was not found beside this binary, so that "
                                         "interpreter also needs `./lmscale python-install`"
                                       : "") +
         ")";
}

}  // namespace lmscale
