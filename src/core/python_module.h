// Running a module of lmscale's Python package from the binary (`python -m lmscale.baseline.e2e`, the
// plots): the interpreter is $LMSCALE_PYTHON (else python3), and PYTHONPATH starts with the package's
// python/ folder when the binary finds one — beside or above itself (a checkout's build/ folder), or
// through the CMakeCache.txt of the build tree it sits in. Otherwise the interpreter must have
// lmscale installed (`./lmscale python-install`). No source path is compiled in: a copied or
// installed binary works, and a module is named by its import path, not by a file.
#pragma once
#include <string>
#include <vector>

#include "core/process.h"

namespace lmscale {

// $LMSCALE_PYTHON, else "python3".
std::string python_interpreter();
// The folder that holds the lmscale package (a checkout's python/), or "" when none was found.
std::string python_package_dir();
// argv of `<interpreter> -m <module> <args...>`.
std::vector<std::string> python_module_argv(const std::string& module, const std::vector<std::string>& args);
// options with PYTHONPATH set to python_package_dir() (ahead of the caller's PYTHONPATH).
ProcessOptions python_module_options(ProcessOptions options);
// The fix to print when the interpreter is missing or lacks torch: names LMSCALE_PYTHON and the
// interpreter used now.
std::string python_fix();

}  // namespace lmscale
