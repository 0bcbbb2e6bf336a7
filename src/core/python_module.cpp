// Finding the interpreter and the lmscale package; see python_module.h.
#include "core/python_module.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>

#include "core/process.h"

namespace lmscale {

std::string python_interpreter() {
  const char* py = std::getenv("LMSCALE_PYTHON");
  return py && *py ? py : "python3";
}

std::string python_package_dir() {
  if (const char* dir = std::getenv("LMSCALE_PYTHONPATH"); dir && *dir) return dir;
  // Where this library was loaded from (the same for the CLI, the tests and the Python extension).
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&python_package_dir), &info) || !info.dli_fname) return "";
  std::error_code ec;
  const auto lib_dir = std::filesystem::weakly_canonical(info.dli_fname, ec).parent_path();
  if (ec) return "";
  for (const auto& candidate : {lib_dir / "python", lib_dir.parent_path() / "python"})
    if (std::filesystem::exists(candidate / "lmscale" / "__init__.py", ec)) return candidate.string();
  return "";
}

std::string PythonCommand::display() const {
  std::string out;
  for (const auto& [k, v] : env) out += k + "=" + display_command({v}) + " ";
  return out + display_command(argv);
}

PythonCommand python_module_command(const std::string& module, const std::vector<std::string>& args) {
  PythonCommand c;
  c.argv = {python_interpreter(), "-m", module};
  c.argv.insert(c.argv.end(), args.begin(), args.end());
  if (const std::string dir = python_package_dir(); !dir.empty()) {
    const char* old = std::getenv("PYTHONPATH");
    c.env.emplace_back("PYTHONPATH", old && *old ? dir + ":" + old : dir);
  }
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
         (needs.empty() ? "" : "; it needs " + needs + " in " + python_interpreter()) +
         " (set LMSCALE_PYTHON to another interpreter); run it later: " + cmd.display();
}

}  // namespace lmscale
