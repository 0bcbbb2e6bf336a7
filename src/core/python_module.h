// Running a module of lmscale's Python package from the binary (`python -m lmscale.baseline.e2e`,
// `python -m lmscale.plots …`): the interpreter is $LMSCALE_PYTHON (else python3), and PYTHONPATH
// starts with the package's python/ folder when one is found (see python_package_dir). Otherwise the
// interpreter must have lmscale installed (`./lmscale python-install`). No source path is compiled
// in: a copied or installed binary works, and a module is named by its import path, not by a file,
// so a renamed file is a Python import error with a name, not a missing script.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/process.h"

namespace lmscale {

// $LMSCALE_PYTHON, else the interpreter the binary's build folder was configured with (its
// CMakeCache.txt's Python3_EXECUTABLE: the one `./lmscale` set up, with torch and matplotlib), else
// the interpreter whose site-packages hold the binary (a wheel's lmscale/bin/lmscale; the `lmscale`
// console script sets LMSCALE_PYTHON itself), else "python3" from PATH.
std::string python_interpreter();
// Where python_interpreter()'s choice came from, for messages ("LMSCALE_PYTHON", "python3 from PATH:
// ..."), so a missing matplotlib or torch is never blamed on an interpreter the user did not pick.
std::string python_interpreter_origin();

// The folder that holds the `lmscale` Python package (the folder to put on PYTHONPATH):
// $LMSCALE_PYTHONPATH, else a `python/` folder beside or up to two levels above the running binary
// or liblmscale (a build folder inside a checkout), else the python/ folder of the source tree named
// by the CMakeCache.txt of the build folder the binary sits in, else "" (the package is expected to
// be installed).
std::string python_package_dir();

// argv of `<interpreter> -m <module> <args...>`.
std::vector<std::string> python_module_argv(const std::string& module, const std::vector<std::string>& args);
// options with PYTHONPATH set to python_package_dir() (ahead of the caller's PYTHONPATH).
ProcessOptions python_module_options(ProcessOptions options);
// The fix to print when the interpreter is missing or lacks torch: names LMSCALE_PYTHON and the
// interpreter used now.
std::string python_fix();

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

// A module that answers in JSON lines on stdout (the e2e baselines, the training reference): runs
// `<python> -m <module> <args…>` with stderr merged and `stdin_path` as stdin ("" = inherited). Each line
// ('\r' stripped) that starts with '{' goes to on_json_line, which returns true when it was an answer;
// every other non-empty line is echoed to stderr after `echo_prefix` (the module's progress and
// warnings), and the last six are kept in `tail`, joined by " | ": the reason, if the module dies.
struct ModuleRun {
  ProcessResult proc;
  std::string tail;
};
ModuleRun run_json_lines_module(const std::string& module, const std::vector<std::string>& args,
                                const std::string& stdin_path, const std::string& echo_prefix,
                                const std::function<bool(const std::string&)>& on_json_line);

}  // namespace lmscale
