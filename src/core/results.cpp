// JSON Lines records and markdown tables; see results.h.
#include "core/results.h"

#include <c10/util/Exception.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

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
  std::string cmd = std::string("git -C '") + LMSCALE_SOURCE_DIR + "' rev-parse --short HEAD 2>/dev/null";
  if (FILE* p = popen(cmd.c_str(), "r")) {
    std::array<char, 64> buf{};
    std::string out;
    while (fgets(buf.data(), buf.size(), p)) out += buf.data();
    pclose(p);
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    if (!out.empty()) return out;
  }
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
  std::string cmd = "lmscale";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool quote = a.find_first_of(" \t\"'") != std::string::npos || a.empty();
    cmd += " " + (quote ? "'" + a + "'" : a);
  }
  mutable_run_info().command = cmd;
}

void set_run_gpu(const std::string& gpu) { mutable_run_info().gpu = gpu; }

Json make_record(const std::string& bench, const std::string& impl) {
  const RunInfo& r = run_info();
  return Json{{"bench", bench}, {"impl", impl},       {"gpu", r.gpu},
              {"commit", r.commit}, {"date", r.date}, {"command", r.command}};
}

void append_jsonl(const std::string& path, const std::vector<Json>& records) {
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream f(path, std::ios::app);
  TORCH_CHECK(f, "cannot open ", path, " for appending: check that the folder is writable (--out)");
  for (const auto& r : records) f << r.dump() << '\n';
}

std::vector<Json> read_jsonl(const std::string& path) {
  std::ifstream f(path);
  TORCH_CHECK(f, "cannot read ", path, ": no such file (run the benchmark first, or check --in)");
  std::vector<Json> out;
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      out.push_back(Json::parse(line));
    } catch (const std::exception& e) {
      TORCH_CHECK(false, path, ":", n, " is not valid JSON (", e.what(), "); fix or delete that line");
    }
  }
  return out;
}

std::string write_text(const std::string& path, const std::string& text) {
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream f(path);
  TORCH_CHECK(f, "cannot write ", path, ": check that the folder is writable");
  f << text;
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
