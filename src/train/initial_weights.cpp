// Writing the initial weights for the PyTorch reference; see initial_weights.h.
#include "train/initial_weights.h"

#include <torch/torch.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "results/record.h"
#include "results/writer.h"

namespace lmscale {

void write_initial_weights(const StepSetup& setup, const std::string& path) {
  StepSetup s = setup;
  s.optimizer_in_backward = false;  // the hooks are irrelevant to the values
  TrainingStep step(s);
  Json index = Json::array();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  TORCH_CHECK(f, "cannot write the initial weights to ", path, ": ", std::strerror(errno),
              "; set TMPDIR to a writable folder with room for them");
  int64_t offset = 0;
  for (const auto& item : step.model()->named_parameters(/*recurse=*/true)) {
    const at::Tensor host = item.value().detach().to(at::kCPU, at::kFloat).contiguous();
    f.write(static_cast<const char*>(host.data_ptr()), static_cast<std::streamsize>(host.nbytes()));
    index.push_back({{"name", item.key()}, {"shape", host.sizes().vec()}, {"offset", offset}});
    offset += host.numel();
  }
  f.flush();
  TORCH_CHECK(f, "writing the initial weights to ", path, " failed (disk full?)");
  write_text(path + ".json", index.dump() + "\n");
}

}  // namespace lmscale
