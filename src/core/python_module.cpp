// Finding the interpreter and lmscale's Python package, and running its modules; see python_module.h.
#include "core/python_module.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>

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

// The folder liblmscale was loaded from (the same for the CLI, the tests and the Python extension).
fs::path library_dir() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&python_package_dir), &info) || !info.dli_fname) return {};
  std::error_code ec;
  const fs::path lib = fs::weakly_canonical(info.dli_fname, ec);
  return ec ? fs::path{} : lib.parent_path();
}

std::string find_package_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  const fs::path exe_dir = ec ? fs::path{} : exe.parent_path();
  const fs::path lib_dir = library_dir();
  for (const fs::path& dir : {exe_dir, lib_dir})
    if (!dir.empty())
      if (std::string found = near(dir); !found.empty()) return found;
  for (const fs::path& dir : {exe_dir, lib_dir})
    if (!dir.empty())
      if (std::string found = from_build_tree(dir); !found.empty()) return found;
  return "";
}

// The interpreter a CMake build folder was configured with (`./lmscale` passes the one that has
// torch as Python3_EXECUTABLE), when it is still there and runnable.
std::string python_of_build_tree(const fs::path& build_dir) {
  std::ifstream cache(build_dir / "CMakeCache.txt");
  const std::string key = "Python3_EXECUTABLE:";
  for (std::string line; std::getline(cache, line);)
    if (line.rfind(key, 0) == 0 && line.find('=') != std::string::npos) {
      const std::string path = line.substr(line.find('=') + 1);
      return !path.empty() && ::access(path.c_str(), X_OK) == 0 ? path : "";
    }
  return "";
}

std::string find_build_python() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  for (const fs::path& dir : {ec ? fs::path{} : exe.parent_path(), library_dir()})
    if (!dir.empty())
      if (std::string found = python_of_build_tree(dir); !found.empty()) return found;
  return "";
}

// The interpreter whose site-packages hold the running binary (a wheel's lmscale/bin/lmscale at
// <prefix>/lib/pythonX.Y/site-packages/lmscale/bin/): <prefix>/bin/pythonX.Y, when it runs.
std::string find_installed_python() {
  std::error_code ec;
  const fs::path exe = fs::weakly_canonical(fs::read_symlink("/proc/self/exe", ec), ec);
  if (ec) return "";
  const fs::path site = exe.parent_path().parent_path().parent_path();  // .../site-packages
  const fs::path lib = site.parent_path();                             // .../lib/pythonX.Y
  if (exe.parent_path().filename() != "bin" || exe.parent_path().parent_path().filename() != "lmscale" ||
      site.filename() != "site-packages" || lib.filename().string().rfind("python", 0) != 0)
    return "";
  for (const fs::path& py : {lib.parent_path().parent_path() / "bin" / lib.filename(),
                             lib.parent_path().parent_path() / "bin" / "python3"})
    if (::access(py.c_str(), X_OK) == 0) return py.string();
  return "";
}

struct Interpreter {
  std::string path, origin;
};

const Interpreter& found_interpreter() {
  // Not python3 first: the build's interpreter is the one `./lmscale` checked for torch (and made
  // with matplotlib), wherever the binary is run from; python3 may be another one entirely.
  static const Interpreter found = [] {
    if (std::string built = find_build_python(); !built.empty())
      return Interpreter{built, "the interpreter its build folder was configured with (CMakeCache.txt)"};
    if (std::string installed = find_installed_python(); !installed.empty())
      return Interpreter{installed, "the interpreter this binary is installed into"};
    return Interpreter{"python3", "python3 from PATH: LMSCALE_PYTHON is unset and no build folder or install "
                                  "beside this binary names an interpreter"};
  }();
  return found;
}

}  // namespace

std::string python_interpreter() {
  const char* p = std::getenv("LMSCALE_PYTHON");
  if (p && *p) return p;
  return found_interpreter().path;
}

std::string python_interpreter_origin() {
  const char* p = std::getenv("LMSCALE_PYTHON");
  if (p && *p) return "LMSCALE_PYTHON";
  return found_interpreter().origin;
}

std::string python_package_dir() {
  if (const char* dir = std::getenv("LMSCALE_PYTHONPATH"); dir && *dir) return dir;
  static const std::string found = find_package_dir();
  return found;
}

std::vector<std::string> python_module_argv(const std::string& module, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {python_interpreter(), "-m", module};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

namespace {
// ("PYTHONPATH", package dir ahead of the caller's), or nothing when no package dir was found.
std::vector<std::pair<std::string, std::string>> python_path_env() {
  const std::string dir = python_package_dir();
  if (dir.empty()) return {};
  const char* prev = std::getenv("PYTHONPATH");
  return {{"PYTHONPATH", prev && *prev ? dir + ":" + prev : dir}};
}
}  // namespace

ProcessOptions python_module_options(ProcessOptions options) {
  for (auto& kv : python_path_env()) options.env.push_back(std::move(kv));
  return options;
}

std::string python_fix() {
  return "set LMSCALE_PYTHON to an interpreter that has torch 2.11 (now: " + python_interpreter() +
         (python_package_dir().empty() ? "; lmscale's python/ folder was not found beside this binary, so that "
                                         "interpreter also needs `./lmscale python-install`"
                                       : "") +
         ")";
}

std::string PythonCommand::display() const {
  std::string out;
  for (const auto& [k, v] : env) out += k + "=" + display_command({v}) + " ";
  return out + display_command(argv);
}

PythonCommand python_module_command(const std::string& module, const std::vector<std::string>& args) {
  PythonCommand c;
  c.argv = python_module_argv(module, args);
  c.env = python_path_env();
  return c;
}

std::string run_python_module(const std::string& module, const std::vector<std::string>& args,
                              const std::function<void(const std::string&)>& on_line, const std::string& needs) {
  const PythonCommand cmd = python_module_command(module, args);
  ProcessOptions po;
  po.env = cmd.env;
  po.capture_stdout = true;
  po.merge_stderr = true;
  std::string last;
  po.on_line = [&](const std::string& line) {
    if (on_line) on_line(line);
    if (!line.empty()) last = line;
  };
  const ProcessResult r = run_process(cmd.argv, po);
  if (r.ok()) return "";
  return "python -m " + module + " " + r.describe() + (last.empty() ? "" : " (" + last + ")") +
         (needs.empty() ? "" : "; it needs " + needs + " in " + python_interpreter()) + " (chosen: " +
         python_interpreter_origin() + "; set LMSCALE_PYTHON to another interpreter); run it later: " + cmd.display();
}

ModuleRun run_json_lines_module(const std::string& module, const std::vector<std::string>& args,
                                const std::string& stdin_path, const std::string& echo_prefix,
                                const std::function<bool(const std::string&)>& on_json_line) {
  std::deque<std::string> tail;
  ProcessOptions options;
  options.capture_stdout = true;
  options.merge_stderr = true;
  options.stdin_path = stdin_path;
  options.on_line = [&](const std::string& raw) {
    std::string line = raw;
    while (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) return;
    if (line.front() == '{' && on_json_line(line)) return;
    std::cerr << echo_prefix << line << "\n";
    tail.push_back(line);
    if (tail.size() > 6) tail.pop_front();
  };
  ModuleRun run;
  run.proc = run_process(python_module_argv(module, args), python_module_options(options));
  for (const auto& l : tail) run.tail += (run.tail.empty() ? "" : " | ") + l;
  return run;
}

}  // namespace lmscale
