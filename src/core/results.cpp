// JSON Lines records and markdown tables; see results.h.
#include "core/results.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <c10/util/Exception.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/process.h"
#include "core/record.h"

namespace lmscale {
namespace {

std::string utc_now() {
  std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string detect_commit() {
  if (const char* c = std::getenv("LMSCALE_COMMIT"); c && *c) return c;
#ifdef LMSCALE_SOURCE_DIR
  // The source tree the binary was built from, if it is still there (a copied binary says "unknown").
  ProcessOptions o;
  o.capture_stdout = true;
  const ProcessResult r = run_process({"git", "-C", LMSCALE_SOURCE_DIR, "rev-parse", "--short", "HEAD"}, o);
  std::string out = r.output;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (r.ok() && !out.empty()) return out;
#endif
  return "unknown";
}

RunInfo& mutable_run_info() {
  static RunInfo info = [] {
    RunInfo r;
    r.date = utc_now();
    r.commit = detect_commit();
    r.gpu = "cpu";
    return r;
  }();
  return info;
}

}  // namespace

const RunInfo& run_info() { return mutable_run_info(); }

void set_run_command(int argc, char** argv) {
  std::vector<std::string> args{"lmscale"};
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  mutable_run_info().command = display_command(args);
}

void set_run_gpu(const std::string& gpu) { mutable_run_info().gpu = gpu; }

Json make_record(const std::string& bench, const std::string& impl) { return Record(bench, impl).json(); }

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
  make_parent(path);
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail_write(path, errno, lost(0));
  for (size_t i = 0; i < records.size(); ++i) {
    const std::string line = records[i].dump() + "\n";
    size_t written = 0;
    if (const int err = write_whole(fd, line, &written)) {
      if (written > 0) {
        // Cut the partial line off, unless another writer appended after it (then it stays whole
        // lines followed by our fragment; the readers skip a bad line with a warning).
        struct stat st {};
        const off_t end = ::lseek(fd, 0, SEEK_CUR);
        if (end >= 0 && ::fstat(fd, &st) == 0 && st.st_size == end)
          (void)!::ftruncate(fd, end - static_cast<off_t>(written));
      }
      ::close(fd);
      fail_write(path, err, lost(i));
    }
  }
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
    const int err = errno;
    ::close(fd);
    fail_write(path, err, "the records may not have reached the disk");
  }
  if (::close(fd) != 0) fail_write(path, errno, "the records may not have reached the disk");
}

namespace {

// Calls fn(line, line number) for every non-blank line of a .jsonl file; a missing file throws.
template <typename Fn>
void for_each_line(const std::string& path, Fn fn) {
  std::ifstream f(path);
  TORCH_CHECK(f, "cannot read ", path, ": no such file (run the benchmark first, or check --in)");
  std::string line;
  size_t n = 0;
  while (std::getline(f, line))
    if (++n, line.find_first_not_of(" \t\r") != std::string::npos) fn(line, n);
}

}  // namespace

std::vector<Json> read_jsonl(const std::string& path) {
  std::vector<Json> out;
  for_each_line(path, [&](const std::string& line, size_t n) {
    Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    TORCH_CHECK(!j.is_discarded(), path, ":", n, " is not valid JSON; fix or delete that line");
    out.push_back(std::move(j));
  });
  return out;
}

std::vector<Json> read_records(const std::string& path, ReadStats* stats, std::ostream* warnings) {
  std::ostream& warn = warnings ? *warnings : std::cerr;
  ReadStats local;
  std::vector<Json> out;
  for_each_line(path, [&](const std::string& line, size_t n) {
    Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    std::string why;
    if (j.is_discarded())
      why = "not valid JSON (a line cut short, or not a record)";
    else if (!j.is_object())
      why = "not a JSON object";
    else if (!j.contains("bench") || !j.contains("metric"))
      why = "a JSON object without bench and metric";
    if (!why.empty()) {
      warn << "warning: " << path << ":" << n << ": " << why << "; line skipped\n";
      ++local.skipped;
      return;
    }
    if (j.contains("schema") && j["schema"].is_number_integer() && j["schema"].get<int64_t>() > kSchemaVersion)
      ++local.newer;
    out.push_back(normalize_record(std::move(j)));
  });
  local.records = out.size();
  if (stats) {
    stats->records += local.records;
    stats->skipped += local.skipped;
    stats->newer += local.newer;
  }
  return out;
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

namespace {
// Display width of a UTF-8 string (counts code points, so "±" and "×" are one column).
size_t display_width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}
}  // namespace

void MarkdownTable::add_row(std::vector<std::string> cells) {
  TORCH_INTERNAL_ASSERT(cells.size() == headers_.size(), "row has ", cells.size(), " cells, table has ",
                        headers_.size(), " columns");
  rows_.push_back(std::move(cells));
}

std::string MarkdownTable::render() const {
  std::vector<size_t> w(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) {
    w[c] = std::max<size_t>(3, display_width(headers_[c]));
    for (const auto& r : rows_) w[c] = std::max(w[c], display_width(r[c]));
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s = "|";
    for (size_t c = 0; c < cells.size(); ++c) s += " " + cells[c] + std::string(w[c] - display_width(cells[c]), ' ') + " |";
    return s + "\n";
  };
  std::string out = line(headers_);
  out += "|";
  for (size_t c = 0; c < headers_.size(); ++c) out += std::string(w[c] + 2, '-') + "|";
  out += "\n";
  for (const auto& r : rows_) out += line(r);
  return out;
}

std::string fmt(double v, int decimals) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string fmt_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return fmt(b, u == 0 ? 0 : 2) + " " + units[u];
}

}  // namespace lmscale
