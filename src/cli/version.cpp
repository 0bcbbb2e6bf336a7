// `lmscale info`: what this build has (CUDA, kernels, torch version) and what device it sees.
#include <torch/cuda.h>
#include <torch/version.h>

#include <iostream>

#include "cli/registry.h"
#include "core/device.h"

LMSCALE_SUBCOMMAND("", "info", "show build features and the visible devices", [](CLI::App& app) {
  app.callback([] {
    std::cout << "libtorch " << TORCH_VERSION << "\n";
#ifdef LMSCALE_CUDA
    std::cout << "CUDA build: yes\n";
#else
    std::cout << "CUDA build: no\n";
#endif
#ifdef LMSCALE_HAS_KERNELS
    std::cout << "lmscale CUDA kernels: yes\n";
#else
    std::cout << "lmscale CUDA kernels: no\n";
#endif
    std::cout << "GPUs visible: " << static_cast<int>(torch::cuda::device_count()) << "\n";
    for (size_t i = 0; i < torch::cuda::device_count(); ++i)
      std::cout << "  cuda:" << i << " " << lmscale::device_name(c10::Device(c10::DeviceType::CUDA, i)) << "\n";
  });
});
