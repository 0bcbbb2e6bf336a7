// The safetensors format (Hugging Face's; what `safetensors.torch.load_file` reads), written and read
// here without the Rust library: an 8-byte little-endian header length N, N bytes of JSON mapping each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data that follows)
// plus an optional "__metadata__" object of strings, then the raw little-endian bytes. Checkpoints
// (checkpoint.h) and `lmscale sample --logits` use it; what the tensors mean is theirs.
#pragma once
#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace lmscale {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Writes `tensors` (any device; copied to the host one at a time, in this order) and `metadata` to
// `path`, then fsyncs it. The header is padded with spaces to a multiple of 8 bytes, as the Rust
// library pads it, so the data is aligned. Returns the file's size in bytes. Throws naming the path
// and the system error (a full disk) or the tensor whose dtype the format lacks.
int64_t write_safetensors(const std::string& path, const NamedTensors& tensors,
                          const std::map<std::string, std::string>& metadata = {});

struct SafetensorsContents {
  std::map<std::string, at::Tensor> tensors;  // on the host
  std::map<std::string, std::string> metadata;
};

// Reads a whole file. Throws naming the file and what is wrong with it (too short, a header length past
// the end, JSON that does not parse, an unknown dtype, offsets that do not match the shape or leave
// holes, a file cut short) — each a sign of a damaged or foreign file.
SafetensorsContents read_safetensors(const std::string& path);

// "F32", "BF16", ...: the format's name of a dtype; throws for one it has no name for.
std::string safetensors_dtype(c10::ScalarType t);

}  // namespace lmscale
