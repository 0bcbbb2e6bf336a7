// SHA-256 (FIPS 180-4) of bytes and of files, as lowercase hex: what a checkpoint's manifest records
// for each of its files, so that `sha256sum` or Python's hashlib can check them too. Portable C++,
// no dependency; throughput is a few hundred MB/s, enough for checkpoints written every K steps.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace lmscale {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  std::string hex_digest();  // finishes the hash; the object is then spent

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(const void* data, size_t n);
// Reads `path` in chunks; throws naming the file when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace lmscale
