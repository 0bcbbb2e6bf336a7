// A token file: uint16 token ids, little-endian, one after another, no header (the CS336 convention,
// what `np.memmap(path, dtype=np.uint16)` reads). TokenFile maps one read-only and checks it once;
// which windows a training run reads from it is data_order.h's job.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lmscale {

class TokenFile {
 public:
  // Maps `path` and checks it: it exists and is a regular file, it is not empty, its size is even
  // (whole uint16 ids), and every id is < vocab (pass the model's vocabulary; 0 skips that check).
  // Each failure throws a message naming the file, the problem and the fix.
  TokenFile(const std::string& path, int64_t vocab);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }  // tokens
  const uint16_t* data() const { return data_; }
  uint16_t operator[](int64_t i) const { return data_[i]; }
  // The largest id in the file (found by the check at open).
  uint16_t max_id() const { return max_id_; }

 private:
  std::string path_;
  const uint16_t* data_ = nullptr;
  int64_t size_ = 0;
  size_t bytes_ = 0;
  uint16_t max_id_ = 0;
};

// Writes ids as a token file (through a temporary file renamed into place); throws naming the path.
void write_token_file(const std::string& path, const std::vector<uint16_t>& ids);

}  // namespace lmscale
