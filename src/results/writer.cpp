// The append-only writer of records and the atomic writer of pages; see writer.h.
#include "results/writer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <c10/util/Exception.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "core/error.h"
#include "core/interrupt.h"

namespace lmscale {
namespace fs = std::filesystem;
namespace {

WriteHook& write_hook() {
  static WriteHook hook;
  return hook;
}

std::atomic<int>& write_failures() {
  static std::atomic<int> n{0};
  return n;
}

std::string errno_name(int err) {
  switch (err) {
    case ENOSPC: return "ENOSPC";
    case EIO: return "EIO";
    case EDQUOT: return "EDQUOT";
    case EACCES: return "EACCES";
    case EROFS: return "EROFS";
    case ENOENT: return "ENOENT";
    case EFBIG: return "EFBIG";
    default: return "errno " + std::to_string(err);
  }
}

long write_some(int fd, const void* data, size_t size) {
  const WriteHook& hook = write_hook();
  return hook ? hook(fd, data, size) : static_cast<long>(::write(fd, data, size));
}

[[noreturn]] void fail_write(const std::string& path, int err, const std::string& lost) {
  ++write_failures();
  throw ResultWriteError("cannot write " + path + ": " + std::strerror(err) + " (" + errno_name(err) + "); " +
                         lost + (err == ENOSPC || err == EDQUOT ? " (free space on that disk, or pass another --out)"
                                                                : " (check the folder and the disk, or pass another --out)"));
}

void make_parent(const std::string& path) {
  std::filesystem::path p(path);
  if (!p.has_parent_path()) return;
  std::error_code ec;
  std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) fail_write(path, ec.value(), "cannot create its folder " + p.parent_path().string());
}

// Writes all of data in one write() call (retried only on EINTR). Returns 0, or the errno; a short
// count is reported as ENOSPC (what a full disk gives) with *written set.
int write_whole(int fd, const std::string& data, size_t* written) {
  *written = 0;
  for (;;) {
    const long n = write_some(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    *written = static_cast<size_t>(n);
    return static_cast<size_t>(n) == data.size() ? 0 : ENOSPC;
  }
}

// Reads [from, to) of fd.
std::string read_range(int fd, off_t from, off_t to) {
  std::string s(static_cast<size_t>(to - from), '\0');
  size_t got = 0;
  while (got < s.size()) {
    const ssize_t n = ::pread(fd, s.data() + got, s.size() - got, from + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  s.resize(got);
  return s;
}

// Note [no gluing]: before appending to a file whose last byte is not a newline, the bytes after
// its last newline (a record cut short) go to <path>.damaged and are cut off. Appending after them
// would glue the first new record onto the fragment: both lost to every reader, and a --resume
// measuring that cell again. Called under the append's flock of the file (append_jsonl), so a record
// another lmscale is writing at that moment is never taken for a fragment. Returns the fragment's
// size (0: the file ended in a newline).
size_t move_fragment_aside(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size == 0) return 0;
  char last = '\n';
  if (::pread(fd, &last, 1, st.st_size - 1) != 1 || last == '\n') return 0;
  off_t start = st.st_size;  // the fragment starts after the last newline (or at 0)
  constexpr off_t kChunk = 65536;
  while (start > 0) {
    const off_t from = start > kChunk ? start - kChunk : 0;
    const std::string chunk = read_range(fd, from, start);
    const size_t nl = chunk.rfind('\n');
    if (nl != std::string::npos) {
      start = from + static_cast<off_t>(nl) + 1;
      break;
    }
    start = from;
  }
  const std::string fragment = read_range(fd, start, st.st_size);
  const std::string aside = path + ".damaged";
  const int afd = ::open(aside.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (afd < 0) fail_write(aside, errno, "the cut last line of " + path + " was not moved aside, so nothing was appended");
  size_t written = 0;
  const int err = write_whole(afd, fragment + "\n", &written);
  if (err || ::fsync(afd) != 0) {
    const int e = err ? err : errno;
    ::close(afd);
    if (e != EINVAL && e != EROFS)
      fail_write(aside, e, "the cut last line of " + path + " was not moved aside, so nothing was appended");
  } else {
    ::close(afd);
  }
  if (::ftruncate(fd, start) != 0)
    fail_write(path, errno, "its cut last line could not be cut off (it is copied to " + aside + "), so nothing was appended");
  std::cerr << "lmscale: the last line of " << path << " was cut short (" << fragment.size()
            << " bytes, no newline): moved to " << aside << " before appending (kept as it was)\n";
  return fragment.size();
}

}  // namespace

int result_write_failures() { return write_failures().load(); }

void set_write_hook(WriteHook hook) { write_hook() = std::move(hook); }

void append_jsonl(const std::string& path, const std::vector<Json>& records) {
  if (records.empty()) return;
  auto lost = [&](size_t from) {
    const Json& first = records[from];
    return std::to_string(records.size() - from) + " of " + std::to_string(records.size()) +
           " records not written, the first " + first.value("bench", "?") + " " + first.value("impl", "?") + " " +
           first.value("metric", "?");
  };
  // The records of one call (one measured cell) leave in one write(): a run cut at any moment leaves
  // the whole cell or none of it, never some of its metrics.
  std::string text;
  for (const auto& r : records) text += r.dump() + "\n";
  make_parent(path);
  const int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail_write(path, errno, lost(0));
  // Appends of lmscale writers take turns (closing the file releases the lock): the check below must
  // not see another writer's record half copied in.
  while (::flock(fd, LOCK_EX) != 0 && errno == EINTR) {
  }
  try {
    move_fragment_aside(fd, path);  // Note [no gluing]
  } catch (...) {
    ::close(fd);
    throw;
  }
  size_t written = 0;
  if (const int err = write_whole(fd, text, &written)) {
    if (written > 0) {
      // Cut the partial cell off, unless another writer appended after it (then it stays whole
      // lines followed by our fragment; the readers skip a bad line with a warning).
      struct stat st {};
      const off_t end = ::lseek(fd, 0, SEEK_CUR);
      if (end >= 0 && ::fstat(fd, &st) == 0 && st.st_size == end)
        (void)!::ftruncate(fd, end - static_cast<off_t>(written));
    }
    ::close(fd);
    fail_write(path, err, lost(0));
  }
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
    const int err = errno;
    ::close(fd);
    fail_write(path, err, "the records may not have reached the disk");
  }
  if (::close(fd) != 0) fail_write(path, errno, "the records may not have reached the disk");
}

void check_output_folder(const std::string& out, const std::string& flag) {
  const std::string fix = "pass a folder you can write, e.g. " + flag + " results";
  if (out.empty() || out.find_first_not_of(" \t") == std::string::npos)
    throw UsageError(flag + " '" + out + "' is empty (the files would land in the filesystem's root): " + fix);
  std::error_code ec;
  const fs::path p(out);
  if (fs::exists(p, ec) && !fs::is_directory(p, ec))
    throw UsageError(flag + " " + out + " is a file, not a folder: " + fix);
  // The folder is made now (as the first record would), and a file is created and removed in it:
  // a folder that cannot be written is refused before the first measurement, not after it.
  fs::create_directories(p, ec);
  if (ec) throw UsageError(flag + " " + out + ": cannot create the folder (" + ec.message() + "): " + fix);
  std::string probe = (p / ".lmscale-write-check-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) throw UsageError(flag + " " + out + " cannot be written (" + std::strerror(errno) + "): " + fix);
  ::close(fd);
  ::unlink(probe.c_str());
}

FolderLock::FolderLock(const std::string& folder, const std::string& name) {
  make_parent((fs::path(folder) / name).string());
  const std::string path = (fs::path(folder) / ("." + name + ".lock")).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail_write(path, errno, "the lock that keeps concurrent runs' tables whole was not taken");
  while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
  }
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

std::string write_text(const std::string& path, const std::string& text) {
  make_parent(path);
  const std::filesystem::path p(path);
  std::string tmp = (p.has_parent_path() ? p.parent_path() / ("." + p.filename().string() + ".XXXXXX")
                                         : std::filesystem::path("." + p.filename().string() + ".XXXXXX"))
                        .string();
  const int fd = ::mkstemp(tmp.data());
  const std::string lost = "its previous content is unchanged";
  if (fd < 0) fail_write(path, errno, lost);
  const TempFileGuard removed_if_stopped(tmp);  // a SIGTERM between here and the rename leaves no temp file
  ::fchmod(fd, 0644);
  size_t written = 0;
  int err = write_whole(fd, text, &written);
  if (!err && ::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) err = errno;
  if (::close(fd) != 0 && !err) err = errno;
  if (!err && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err) {
    ::unlink(tmp.c_str());
    fail_write(path, err, lost);
  }
  return path;
}

}  // namespace lmscale
