// Results that cannot be lost silently: a failing disk (injected, and a real tiny tmpfs when this
// runs as root) leaves only whole lines and an error naming the path; concurrent writers never
// interleave a line; pages are replaced whole or not at all.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/process.h"
#include "results/writer.h"
#include "support/run_cli.h"

namespace lmscale {
namespace {

using testing::read_text;
using testing::temp_dir;

std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream f(path);
  for (std::string l; std::getline(f, l);) out.push_back(l);
  return out;
}

// A whole JSON object (not a line cut short).
bool is_record(const std::string& line) { return Json::parse(line, nullptr, false).is_object(); }

std::vector<Json> some_records(int n, size_t pad = 0) {
  std::vector<Json> out;
  for (int i = 0; i < n; ++i)
    out.push_back(Record("test", "writer").set("i", i).set("pad", std::string(pad, 'x')).metric("m", i, "ms"));
  return out;
}

// Restores ::write after each test, whatever it installed.
struct WriteHookGuard {
  ~WriteHookGuard() { set_write_hook({}); }
};

TEST(ResultsWriter, AppendsWholeLines) {
  const std::string path = temp_dir("writer") + "/sub/r.jsonl";  // the folder is created
  append_jsonl(path, some_records(3));
  append_jsonl(path, some_records(2));
  const auto lines = lines_of(path);
  ASSERT_EQ(lines.size(), 5u);
  for (const auto& l : lines) EXPECT_TRUE(is_record(l)) << l;
}

// A file whose last line was cut (no newline): the fragment is moved to <file>.damaged and cut off
// before the append, so the new records never glue onto it; a whole file is appended to as it is.
TEST(ResultsWriter, NeverAppendsToALineWithoutItsNewline) {
  const std::string path = temp_dir("writer-cut") + "/e2e.jsonl";
  append_jsonl(path, some_records(2));
  const std::string whole = read_text(path);
  const std::string cut = whole + whole.substr(0, 40);  // a third record cut after 40 bytes
  std::ofstream(path, std::ios::trunc) << cut;
  append_jsonl(path, some_records(1));
  const auto lines = lines_of(path);
  ASSERT_EQ(lines.size(), 3u) << read_text(path);
  for (const auto& l : lines) EXPECT_TRUE(is_record(l)) << l;
  EXPECT_EQ(read_text(path).substr(0, whole.size()), whole);
  EXPECT_EQ(read_text(path + ".damaged"), whole.substr(0, 40) + "\n");
  // A fragment alone in the file (no newline at all) goes aside the same way.
  const std::string lone = temp_dir("writer-cut-lone") + "/e2e.jsonl";
  std::ofstream(lone) << "{\"bench\": \"e2e\", \"cut";
  append_jsonl(lone, some_records(1));
  ASSERT_EQ(lines_of(lone).size(), 1u);
  EXPECT_TRUE(is_record(lines_of(lone)[0]));
  EXPECT_EQ(read_text(lone + ".damaged"), "{\"bench\": \"e2e\", \"cut\n");
  // Whole lines: nothing moved.
  append_jsonl(path, some_records(1));
  EXPECT_EQ(lines_of(path).size(), 4u);
  EXPECT_EQ(read_text(path + ".damaged"), whole.substr(0, 40) + "\n");
}

TEST(ResultsWriter, DiskFullLeavesWholeCellsAndSaysWhatWasLost) {
  WriteHookGuard guard;
  const std::string path = temp_dir("full") + "/e2e.jsonl";
  append_jsonl(path, some_records(2));
  // The disk takes one more cell, then half of the next one, then nothing.
  int calls = 0;
  set_write_hook([&](int fd, const void* data, size_t size) -> long {
    ++calls;
    if (calls == 1) return ::write(fd, data, size);
    if (calls == 2) return ::write(fd, data, size / 2);
    errno = ENOSPC;
    return -1;
  });
  const int failures = result_write_failures();
  append_jsonl(path, some_records(3));
  try {
    append_jsonl(path, some_records(5));
    FAIL() << "a full disk must not pass silently";
  } catch (const ResultWriteError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("ENOSPC"), std::string::npos) << msg;
    EXPECT_NE(msg.find("5 of 5 records not written"), std::string::npos) << msg;
  }
  EXPECT_EQ(result_write_failures(), failures + 1);
  set_write_hook({});
  const auto lines = lines_of(path);
  EXPECT_EQ(lines.size(), 5u);  // 2 + 3 whole lines; the half cell was cut off whole
  for (const auto& l : lines) EXPECT_TRUE(is_record(l)) << "a partial line was left: " << l;
  EXPECT_EQ(read_text(path).back(), '\n');
}

// Issue 29, row 12: the records of one call (one cell) leave in one write(), so a run cut at any
// moment keeps the whole cell or none of it.
TEST(ResultsWriter, OneCellIsOneWrite) {
  WriteHookGuard guard;
  const std::string path = temp_dir("one-write") + "/e2e.jsonl";
  int calls = 0;
  set_write_hook([&](int fd, const void* data, size_t size) -> long {
    ++calls;
    return ::write(fd, data, size);
  });
  append_jsonl(path, some_records(9));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(lines_of(path).size(), 9u);
}

// Issue 29, rows 2 and 16: an output folder that cannot hold results is refused before anything is
// measured, naming the flag and the fix.
TEST(ResultsWriter, OutputFolderIsCheckedFirst) {
  const std::string dir = temp_dir("outcheck");
  auto message = [](const std::string& out) -> std::string {
    try {
      check_output_folder(out, "--out");
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message("").find("--out '' is empty"), std::string::npos) << message("");
  EXPECT_NE(message("  ").find("is empty"), std::string::npos);
  std::ofstream(dir + "/a-file") << "x";
  EXPECT_NE(message(dir + "/a-file").find("is a file, not a folder"), std::string::npos) << message(dir + "/a-file");
  // A folder below a file cannot be made, whoever runs the test (root included).
  EXPECT_NE(message(dir + "/a-file/sub").find("cannot create the folder"), std::string::npos) << message(dir + "/a-file/sub");
  EXPECT_EQ(message(dir + "/new/results"), "");
  const auto ls = run_process({"ls", "-A", dir + "/new/results"}, ProcessOptions{true});
  EXPECT_EQ(ls.output, "") << "the write check left a file behind";
}

TEST(ResultsWriter, IoErrorIsNamed) {
  WriteHookGuard guard;
  const std::string path = temp_dir("eio") + "/r.jsonl";
  set_write_hook([](int, const void*, size_t) -> long {
    errno = EIO;
    return -1;
  });
  try {
    append_jsonl(path, some_records(1));
    FAIL() << "an I/O error must not pass silently";
  } catch (const ResultWriteError& e) {
    EXPECT_NE(std::string(e.what()).find("EIO"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1 of 1 records"), std::string::npos) << e.what();
  }
}

TEST(ResultsWriter, TablesAreReplacedWholeOrNotAtAll) {
  WriteHookGuard guard;
  const std::string dir = temp_dir("table");
  const std::string path = dir + "/e2e.md";
  write_text(path, "old table\n");
  set_write_hook([](int fd, const void* data, size_t size) -> long { return ::write(fd, data, size / 3); });
  EXPECT_THROW(write_text(path, "a new table that does not fit\n"), ResultWriteError);
  set_write_hook({});
  EXPECT_EQ(read_text(path), "old table\n");
  // No temporary file left behind.
  const auto ls = run_process({"ls", "-A", dir}, ProcessOptions{true});
  EXPECT_EQ(ls.output, "e2e.md\n");
  write_text(path, "new\n");
  EXPECT_EQ(read_text(path), "new\n");
}

TEST(ResultsWriter, ConcurrentProcessesNeverInterleaveALine) {
  const std::string path = temp_dir("concurrent") + "/r.jsonl";
  // Lines longer than PIPE_BUF and a page, so a non-atomic writer would show torn lines.
  constexpr int kWriters = 4, kBatches = 50, kPerBatch = 4;
  std::vector<pid_t> children;
  for (int w = 0; w < kWriters; ++w) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      try {
        for (int b = 0; b < kBatches; ++b) append_jsonl(path, some_records(kPerBatch, 5000 + 1000 * w));
      } catch (...) {
        rc = 1;
      }
      _exit(rc);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const auto lines = lines_of(path);
  EXPECT_EQ(lines.size(), size_t(kWriters * kBatches * kPerBatch));
  for (const auto& l : lines) ASSERT_TRUE(is_record(l)) << "torn line of " << l.size() << " bytes";
}

// A real full disk: a 64 KiB tmpfs (needs root and mount; skipped otherwise).
TEST(ResultsWriter, RealTinyTmpfsFillsUp) {
  const std::string dir = temp_dir("tmpfs");
  if (geteuid() != 0 || ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k") != 0)
    GTEST_SKIP() << "needs root and mount(2) to make a tiny tmpfs";
  const std::string path = dir + "/e2e.jsonl";
  std::string error;
  int batches = 0;
  try {
    for (; batches < 1000; ++batches) append_jsonl(path, some_records(3, 900));
  } catch (const ResultWriteError& e) {
    error = e.what();
  }
  const auto lines = lines_of(path);
  ::umount(dir.c_str());
  EXPECT_NE(error.find("ENOSPC"), std::string::npos) << "64 KiB took " << batches << " batches: " << error;
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_GT(lines.size(), 0u);
  for (const auto& l : lines) EXPECT_TRUE(is_record(l)) << "partial line on a full disk: " << l.substr(0, 80);
}

// A benchmark whose records cannot be written says so, names the file, and exits non-zero.
TEST(ResultsWriter, RunExitsNonZeroWhenItsRecordsCannotBeWritten) {
  const std::string dir = temp_dir("devfull");
  ASSERT_EQ(::symlink("/dev/full", (dir + "/e2e.jsonl").c_str()), 0);  // every write: ENOSPC
  const auto r = testing::run_cli_argv({"bench", "--device", "cpu", "--size", "tiny", "--batch", "2", "--warmup",
                                        "1", "--steps", "2", "--context", "16", "--out", dir});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(dir + "/e2e.jsonl"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ENOSPC"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("wrote "), std::string::npos) << "claims to have written results:\n" << r.output;
}

}  // namespace
}  // namespace lmscale
