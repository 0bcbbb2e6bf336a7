// A token file: uint16 token ids, little-endian, one after another, no header (the CS336 convention,
// what `np.memmap(path, dtype=np.uint16)` reads). TokenFile maps one read-only and checks it once;
// which windows a training run reads from it is data_order.h's job. A file cut shorter while it is
// mapped ends the process with a message naming it (core/interrupt.h's MappedFileGuard), not a bare
// SIGBUS.
#pragma once
#include <cstdint>
#include <memory>
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
  // A 64-bit hash of the ids (FNV-1a over the 16-bit ids, found by the same pass): what tells two
  // corpora of one name and length apart (a run's resume key, train_run.h).
  uint64_t content_hash() const { return hash_; }

 private:
  std::string path_;
  const uint16_t* data_ = nullptr;
  int64_t size_ = 0;
  size_t bytes_ = 0;
  uint16_t max_id_ = 0;
  uint64_t hash_ = 0;
  std::shared_ptr<void> guard_;  // the mapping's registration with the SIGBUS handler
};

// The hash content_hash() computes, continued over `ids` from `seed` (FNV-1a's offset basis to start).
inline constexpr uint64_t kFnvOffset = 14695981039346656037ull;
uint64_t hash_ids(const uint16_t* ids, int64_t n, uint64_t seed = kFnvOffset);

// Writes ids as a token file (through a temporary file renamed into place); throws naming the path.
void write_token_file(const std::string& path, const std::vector<uint16_t>& ids);

}  // namespace lmscale
