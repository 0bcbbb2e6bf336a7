// Precompiled header for every translation unit that uses libtorch: parsing torch/torch.h once
// instead of per file is what keeps a 2-core rebuild short. Only stable third-party headers here.
#pragma once
#include <torch/torch.h>
#include <nlohmann/json.hpp>
