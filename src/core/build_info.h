// What this build holds and what it can run on, for `lmscale info`: version and commit, compiler,
// CUDA toolkit and kernel architectures, the GPUs it sees and whether the kernels run on them, the
// distributed backends, the Python extension and the interpreter the PyTorch baselines use.
#pragma once
#include <ostream>
#include <string>

namespace lmscale {

// Called by `lmscale info` (src/cli/info.cpp). Reads the GPUs and starts the baseline interpreter once
// (`$LMSCALE_PYTHON`, else python3) to name its torch; looks for lmscale._C beside the running binary.
// `commit` is the source commit the caller knows (results::run_info(): core sits below the record room).
void print_build_info(std::ostream& out, const std::string& commit);

}  // namespace lmscale
