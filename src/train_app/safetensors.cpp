// The safetensors format; see safetensors.h. Layout: [u64 LE header length][header JSON][data].
#include "train_app/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>

#include "results/record.h"  // Json

namespace lmscale {

namespace {

const std::vector<std::pair<c10::ScalarType, std::string>>& dtype_names() {
  static const std::vector<std::pair<c10::ScalarType, std::string>> names = {
      {at::kFloat, "F32"},  {at::kDouble, "F64"}, {at::kBFloat16, "BF16"}, {at::kHalf, "F16"},
      {at::kLong, "I64"},   {at::kInt, "I32"},    {at::kShort, "I16"},     {at::kChar, "I8"},
      {at::kByte, "U8"},    {at::kBool, "BOOL"},  {at::kFloat8_e4m3fn, "F8_E4M3"}, {at::kFloat8_e5m2, "F8_E5M2"}};
  return names;
}

// write(2) until every byte is out; throws naming the path on a short or failed write.
void write_all(int fd, const std::string& path, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : ENOSPC;  // a write of 0 bytes: the disk is full
      ::close(fd);
      TORCH_CHECK(false, "writing ", path, " failed: ", std::strerror(err),
                  err == ENOSPC ? " (free some space or pass another --checkpoint-dir)" : "");
    }
    p += w, n -= static_cast<size_t>(w);
  }
}

}  // namespace

std::string safetensors_dtype(c10::ScalarType t) {
  for (const auto& [type, name] : dtype_names())
    if (type == t) return name;
  TORCH_CHECK(false, "safetensors has no dtype for ", c10::toString(t));
}

int64_t write_safetensors(const std::string& path, const NamedTensors& tensors,
                          const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    TORCH_CHECK(!header.contains(name) && name != "__metadata__", "write_safetensors: tensor name ", name,
                " is used twice or reserved");
    const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
    header[name] = {{"dtype", safetensors_dtype(t.scalar_type())}, {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));

  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TORCH_CHECK(fd >= 0, "cannot write ", path, ": ", std::strerror(errno));
  write_all(fd, path, len, sizeof len);
  write_all(fd, path, text.data(), text.size());
  for (const auto& [name, t] : tensors) {
    const at::Tensor host = t.detach().to(at::kCPU).contiguous();
    write_all(fd, path, host.data_ptr(), host.nbytes());
  }
  const bool synced = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  TORCH_CHECK(synced, "writing ", path, " failed at fsync: ", std::strerror(err));
  return 8 + static_cast<int64_t>(text.size()) + offset;
}

SafetensorsContents read_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  TORCH_CHECK(f, "cannot read ", path, ": ", std::strerror(errno));
  f.seekg(0, std::ios::end);
  const int64_t size = f.tellg();
  f.seekg(0);
  const std::string what = path + " is not a whole safetensors file (damaged or cut short): ";
  TORCH_CHECK(size >= 8, what, "it has ", size, " bytes, less than the 8 of its header length");
  uint8_t len[8];
  f.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  TORCH_CHECK(n <= static_cast<uint64_t>(size - 8), what, "its header length ", n, " runs past the end of its ",
              size, " bytes");
  std::string text(n, '\0');
  f.read(text.data(), static_cast<std::streamsize>(n));
  const Json header = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  TORCH_CHECK(header.is_object(), what, "its header is not a JSON object");
  const int64_t data_size = size - 8 - static_cast<int64_t>(n);

  SafetensorsContents out;
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") {
      TORCH_CHECK(e.is_object(), what, "__metadata__ is not an object");
      for (const auto& [k, v] : e.items()) {
        TORCH_CHECK(v.is_string(), what, "__metadata__ value of ", k, " is not a string");
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    TORCH_CHECK(e.is_object() && e.contains("dtype") && e.contains("shape") && e.contains("data_offsets") &&
                    e["dtype"].is_string() && e["shape"].is_array() && e["data_offsets"].is_array() &&
                    e["data_offsets"].size() == 2,
                what, "the entry of ", name, " lacks dtype, shape or data_offsets");
    std::optional<c10::ScalarType> type;
    for (const auto& [t, dn] : dtype_names())
      if (dn == e["dtype"].get<std::string>()) type = t;
    TORCH_CHECK(type, what, name, " has dtype ", e["dtype"].get<std::string>(), ", which lmscale does not read");
    std::vector<int64_t> shape;
    for (const auto& d : e["shape"]) {
      TORCH_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, what, name, " has a bad shape");
      shape.push_back(d.get<int64_t>());
    }
    const int64_t begin = e["data_offsets"][0].get<int64_t>(), end = e["data_offsets"][1].get<int64_t>();
    at::Tensor t = at::empty(shape, at::TensorOptions().dtype(*type));
    TORCH_CHECK(begin >= 0 && end >= begin && end - begin == static_cast<int64_t>(t.nbytes()), what, name,
                " has data_offsets [", begin, ", ", end, "] for ", t.nbytes(), " bytes of shape ", t.sizes());
    TORCH_CHECK(end <= data_size, what, name, " ends at byte ", end, " of data that holds ", data_size);
    f.seekg(8 + static_cast<std::streamoff>(n) + begin);
    f.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
    TORCH_CHECK(f, what, "reading ", name, " failed");
    spans.emplace_back(begin, end);
    out.tensors[name] = t;
  }
  // The format's own rule: the tensors tile the data exactly, no hole and no overlap.
  std::sort(spans.begin(), spans.end());
  int64_t at = 0;
  for (const auto& [b, e] : spans) {
    TORCH_CHECK(b == at, what, "its tensors leave a hole or overlap at byte ", at, " of the data");
    at = e;
  }
  TORCH_CHECK(at == data_size, what, "its tensors end at byte ", at, " of ", data_size, " bytes of data");
  return out;
}

}  // namespace lmscale
