// Starting lmscale's Python modules (the plots, the PyTorch baselines) from the binary: through the
// interpreter (`<python> -m lmscale.plots …`), never through a source path compiled into the
// binary, so a copied or installed binary keeps working and a renamed file is a Python import error
// with a name, not a missing script.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace lmscale {

// The interpreter: $LMSCALE_PYTHON, else `python3` from PATH.
std::string python_interpreter();

// The folder that holds the `lmscale` Python package (the folder to put on PYTHONPATH):
// $LMSCALE_PYTHONPATH, else a `python/` folder beside or one level above the folder of liblmscale
// (a build folder inside a checkout), else "" (the package is expected to be installed).
std::string python_package_dir();

// argv and environment for `<python> -m <module> <args…>`, PYTHONPATH led by python_package_dir().
struct PythonCommand {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;
  // For messages: "PYTHONPATH=… python3 -m lmscale.plots report 'my results'".
  std::string display() const;
};
PythonCommand python_module_command(const std::string& module, const std::vector<std::string>& args);

// Runs `<python> -m <module> <args…>` (no shell: any path is one argument), passing each line of its
// output (stdout and stderr) to on_line. Returns "" when it succeeded, else one line saying what
// happened, what the module needs (`needs`, e.g. "matplotlib") and the command to run later.
std::string run_python_module(const std::string& module, const std::vector<std::string>& args,
                              const std::function<void(const std::string&)>& on_line = {},
                              const std::string& needs = "");

}  // namespace lmscale
