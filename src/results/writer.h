// The writer of results: records appended to `<out>/<bench>.jsonl` one whole line per write()
// (readers never see half a record, concurrent writers never interleave), and pages (tables, the
// index) replaced atomically. Failures name the path and what was lost (ResultWriteError).
#pragma once
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "results/record.h"

namespace lmscale {

// A result that could not be written (disk full, I/O error, folder not writable). The message names
// the path, the system error and what was not written; the run must end non-zero (never caught as a
// failed measurement).
class ResultWriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Appends one JSON object per line to path (parent folders are created). The lines of one call (one
// measured cell) are built whole and written with one write() on an O_APPEND descriptor, so the file
// only ever holds whole cells (a short write is cut back) and concurrent writers never interleave;
// the file is fsynced before returning. Throws ResultWriteError naming the path and how many records
// were not written. A file whose last line lacks its newline (cut by a crash, a full disk under
// another tool, a copy cut short) is never appended to as it is: the fragment is moved to
// <path>.damaged (as `lmscale report` moves damaged lines) and cut off first, with one line on
// stderr, so the new records never glue onto it.
void append_jsonl(const std::string& path, const std::vector<Json>& records);

// Checks a results folder before anything is measured: not empty, not a file, creatable and
// writable (the folder is made, and a file created and removed in it). Throws UsageError (exit 2)
// naming `flag`, the value and the fix.
void check_output_folder(const std::string& out, const std::string& flag = "--out");

// An exclusive lock on <folder>/.<name>.lock (flock), held for the object's life: runs that write
// to one folder at once take turns rebuilding its tables from the records on disk, so the last
// writer's table holds every run's rows.
class FolderLock {
 public:
  FolderLock(const std::string& folder, const std::string& name);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};
// Writes text to path through a temporary file in the same folder, fsynced and renamed into place,
// so a reader sees the old file or the new one, never half of one. Throws ResultWriteError; returns path.
std::string write_text(const std::string& path, const std::string& text);
// How many writes of results failed in this process (each also threw ResultWriteError).
int result_write_failures();

// The system call writes go through: ::write, unless a test installs a fault (a full disk, an I/O
// error, a short write). Pass an empty function to restore ::write.
using WriteHook = std::function<long(int fd, const void* data, size_t size)>;
void set_write_hook(WriteHook hook);

}  // namespace lmscale
