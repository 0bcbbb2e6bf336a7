// The memory-mapped token file; see token_file.h.
#include "train_app/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <c10/util/Exception.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/interrupt.h"

namespace lmscale {

static_assert(sizeof(uint16_t) == 2, "token files hold 2-byte ids");

uint64_t hash_ids(const uint16_t* ids, int64_t n, uint64_t h) {
  constexpr uint64_t kPrime = 1099511628211ull;
  for (int64_t i = 0; i < n; ++i) h = (h ^ ids[i]) * kPrime;
  return h;
}

TokenFile::TokenFile(const std::string& path, int64_t vocab) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TORCH_CHECK(fd >= 0, "token file ", path, ": cannot open it (", std::strerror(errno),
              "); make one with `lmscale train corpus --out DIR` or pass the right path");
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    TORCH_CHECK(false, "token file ", path, " is not a regular file: pass a file of uint16 token ids");
  }
  bytes_ = static_cast<size_t>(st.st_size);
  if (bytes_ == 0) {
    ::close(fd);
    TORCH_CHECK(false, "token file ", path, " is empty: it holds no tokens; rebuild it (`lmscale train corpus`) "
                "from sources that are not empty");
  }
  if (bytes_ % 2 != 0) {
    ::close(fd);
    TORCH_CHECK(false, "token file ", path, " has ", bytes_, " bytes, an odd count: a token file holds uint16 ids "
                "(2 bytes each), so it is truncated or not a token file; rebuild it (`lmscale train corpus`)");
  }
  void* m = ::mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, fd, 0);
  const int mmap_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  TORCH_CHECK(m != MAP_FAILED, "token file ", path, ": cannot map it (", std::strerror(mmap_errno), ")");
  data_ = static_cast<const uint16_t*>(m);
  size_ = static_cast<int64_t>(bytes_ / 2);
  // From here a read past a shrunken file's end is a SIGBUS the handler turns into a message.
  guard_ = std::make_shared<MappedFileGuard>(data_, bytes_, path_,
                                             "token file " + path_ + " changed while training: it is shorter than "
                                             "when it was opened (truncated or rewritten in place by another "
                                             "program), so the run cannot read it. Leave a run's token files alone "
                                             "until it ends (`lmscale train corpus` replaces them through a renamed "
                                             "temporary file, which a running train does not see), then run again: "
                                             "--resume keeps the evaluations already recorded");
  // One pass over the ids: an id the model has no embedding row for would fail deep inside the
  // forward (or read out of bounds in a kernel), so it is refused here with its position.
  int64_t first_bad = -1;
  for (int64_t i = 0; i < size_; ++i) {
    const uint16_t id = data_[i];
    if (id > max_id_) max_id_ = id;
    if (vocab > 0 && id >= vocab && first_bad < 0) first_bad = i;
  }
  hash_ = hash_ids(data_, size_);
  if (first_bad >= 0) {
    const uint16_t bad = data_[first_bad];
    guard_.reset();
    ::munmap(const_cast<uint16_t*>(data_), bytes_);
    data_ = nullptr;
    TORCH_CHECK(false, "token file ", path, ": token ", first_bad, " is id ", bad, " but the model's vocabulary has ",
                vocab, " ids (0..", vocab - 1, "; the largest id in the file is ", max_id_,
                "): use a model with a larger vocabulary (--size custom --vocab ", max_id_ + 1,
                ") or a token file made for this one");
  }
}

TokenFile::~TokenFile() {
  guard_.reset();  // unregistered before the range can be mapped again for something else
  if (data_) ::munmap(const_cast<uint16_t*>(data_), bytes_);
}

void write_token_file(const std::string& path, const std::vector<uint16_t>& ids) {
  // Host byte order: every machine lmscale runs on is little-endian, which the convention asks for.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    TORCH_CHECK(f, "cannot write token file ", tmp, ": check the folder exists and is writable");
    f.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * sizeof(uint16_t)));
    f.flush();
    TORCH_CHECK(f, "writing token file ", tmp, " failed (disk full?)");
  }
  TORCH_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename ", tmp, " to ", path, ": ",
              std::strerror(errno));
}

}  // namespace lmscale
