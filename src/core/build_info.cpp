// `lmscale info`'s report (see build_info.h). CMake sets the LMSCALE_VERSION / LMSCALE_BUILD_* macros
// on this file only, so a compiler or architecture change rebuilds it alone.
#include "core/build_info.h"

#include <torch/cuda.h>
#include <torch/version.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/process.h"
#include "core/python_module.h"

#ifndef LMSCALE_VERSION  // CMake sets these on this file (see CMakeLists.txt)
#define LMSCALE_VERSION "unknown"
#define LMSCALE_BUILD_COMPILER "unknown"
#define LMSCALE_BUILD_CUDA ""
#define LMSCALE_BUILD_ARCHS ""
#endif

namespace lmscale {
namespace {

std::filesystem::path executable_dir() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return {};
  return std::filesystem::path(std::string(path, static_cast<size_t>(n))).parent_path();
}

// lmscale._C lands next to the binary and liblmscale.so in a build folder (python/CMakeLists.txt),
// one folder above the binary in an installed wheel (lmscale/bin/lmscale beside lmscale/_C.*.so).
std::string python_extension() {
  std::error_code ec;
  for (const auto& dir : {executable_dir(), executable_dir().parent_path()})
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("_C.", 0) == 0 && name.size() > 3 && name.substr(name.size() - 3) == ".so")
        return "built (" + e.path().string() + ")";
    }
  return "not built (./lmscale build builds it when the interpreter's headers are there: python3-dev)";
}

// The interpreter every Python step of the binary runs (python_interpreter(): $LMSCALE_PYTHON, the
// build's, the install's, else python3), with where that choice came from.
std::string baseline_interpreter() {
  const char* env = std::getenv("LMSCALE_PYTHON");
  const std::string py = python_interpreter();
  ProcessOptions o;
  o.capture_stdout = true;
  o.merge_stderr = true;
  const auto r = run_process(
      {py, "-c", "import sys; v = sys.version.split()[0]\ntry:\n import torch; t = 'torch ' + torch.__version__\n"
                 "except Exception as e: t = 'no torch (' + type(e).__name__ + ')'\nprint(sys.executable, v, t)"},
      o);
  std::string out = r.output;
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  const std::string from = env && *env ? " ($LMSCALE_PYTHON)"
                                       : " (" + python_interpreter_origin() + "; set LMSCALE_PYTHON to change)";
  if (!r.ok()) return py + from + ": " + (r.started ? "fails: " + out : r.error);
  return out + from;
}

std::string join_archs(const std::vector<int>& archs) {
  std::string s;
  for (int a : archs) s += (s.empty() ? "sm_" : ", sm_") + std::to_string(a);
  return s;
}

}  // namespace

void print_build_info(std::ostream& out, const std::string& commit) {
  out << "lmscale " << LMSCALE_VERSION << " (commit " << (commit.empty() ? "unknown" : commit)
      << ")\n";
  out << "compiler: " << LMSCALE_BUILD_COMPILER << ", libtorch " << TORCH_VERSION << "\n";
  const auto archs = built_cuda_archs();
#ifdef LMSCALE_CUDA
  out << "CUDA toolkit: " << (std::string(LMSCALE_BUILD_CUDA).empty() ? "yes" : LMSCALE_BUILD_CUDA) << "\n";
#else
  out << "CUDA toolkit: none at build time (CPU-only build)\n";
#endif
  out << "kernels: "
      << (archs.empty() ? std::string("not built")
                        : join_archs(archs) + " machine code, PTX of sm_" + std::to_string(archs.back()))
      << "\n";
  const int gpus = static_cast<int>(torch::cuda::device_count());
  out << "GPUs visible: " << gpus << (gpus ? "" : " (runs use the CPU)") << "\n";
  for (int i = 0; i < gpus; ++i) {
    const c10::Device d(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(i));
    const auto [major, minor] = cuda_capability(i);
    const auto k = kernel_support(device_name(d), major, minor, archs);
    out << "  cuda:" << i << " " << device_name(d) << ", compute capability " << major << "." << minor
      << ": kernels " << (k.runs ? "run (" + k.how + ")" : "do not run: " + k.message) << "\n";
  }
  out << "distributed backends: gloo (CPU tensors) yes; nccl (GPU tensors) ";
#ifdef LMSCALE_CUDA
  out << (gpus ? "yes" : "built, needs GPUs") << "\n";
#else
  out << "no (CPU-only build)\n";
#endif
  out << "Python extension lmscale._C: " << python_extension() << "\n";
  out << "baseline interpreter: " << baseline_interpreter() << "\n";
}

}  // namespace lmscale
