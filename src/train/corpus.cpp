// The byte-level corpus maker; see corpus.h.
#include "train/corpus.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/process.h"
#include "core/python_module.h"
#include "results/record.h"
#include "results/writer.h"
#include "train/token_file.h"

namespace lmscale {

namespace fs = std::filesystem;

std::pair<std::string, std::string> python_stdlib() {
  ProcessOptions o;
  o.capture_stdout = true;
  const std::string python = python_interpreter();
  const ProcessResult r = run_process(
      {python, "-c", "import sys, sysconfig; print(sysconfig.get_paths()['stdlib']); print('%d.%d' % sys.version_info[:2])"},
      o);
  std::string dir, version;
  if (r.ok()) {
    const size_t nl = r.output.find('\n');
    dir = r.output.substr(0, nl);
    if (nl != std::string::npos) version = r.output.substr(nl + 1, r.output.find('\n', nl + 1) - nl - 1);
  }
  TORCH_CHECK(!dir.empty() && fs::is_directory(dir), "cannot find the Python standard library: ", python, " ",
              r.describe(), (dir.empty() ? "" : ", named " + dir),
              "; set LMSCALE_PYTHON to an interpreter, or pass --from FOLDER with text files");
  return {dir, "python-" + version + "-stdlib"};
}

bool is_validation_file(const std::string& relative_path, int64_t val_percent) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bit: fixed, so the split is the same everywhere
  for (unsigned char c : relative_path) h = (h ^ c) * 1099511628211ull;
  return static_cast<int64_t>(h % 100) < val_percent;
}

namespace {

bool skipped_folder(const fs::path& p) {
  const std::string n = p.filename().string();
  return n == "site-packages" || n == "dist-packages" || n == "__pycache__";
}

// (relative path, full path) of every file a source contributes, sorted by relative path.
std::vector<std::pair<std::string, fs::path>> files_of(const fs::path& source, const std::string& extension) {
  std::vector<std::pair<std::string, fs::path>> files;
  if (fs::is_regular_file(source)) {
    files.emplace_back(source.filename().string(), source);
    return files;
  }
  TORCH_CHECK(fs::is_directory(source), "--from ", source.string(), " is neither a file nor a folder");
  for (auto it = fs::recursive_directory_iterator(source, fs::directory_options::skip_permission_denied);
       it != fs::recursive_directory_iterator(); ++it) {
    if (it->is_directory() && skipped_folder(it->path())) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file() && it->path().extension() == extension)
      files.emplace_back(fs::relative(it->path(), source).string(), it->path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

void append_file(const fs::path& p, std::vector<uint16_t>& ids) {
  std::ifstream f(p, std::ios::binary);
  TORCH_CHECK(f, "cannot read ", p.string());
  for (auto it = std::istreambuf_iterator<char>(f); it != std::istreambuf_iterator<char>(); ++it)
    ids.push_back(static_cast<unsigned char>(*it));
  ids.push_back(kEndOfFile);
}

}  // namespace

CorpusSummary make_corpus(const CorpusOptions& o) {
  TORCH_CHECK(!o.out.empty(), "make_corpus: no output folder (--out)");
  TORCH_CHECK(o.val_percent > 0 && o.val_percent < 100, "--val-percent must be between 1 and 99, got ", o.val_percent);
  CorpusSummary s;
  std::vector<std::string> sources = o.sources;
  if (sources.empty()) {
    auto [dir, name] = python_stdlib();
    sources = {dir};
    s.name = name;
  } else {
    s.name = "files";
  }
  std::vector<uint16_t> train, val;
  Json val_files = Json::array();
  for (const auto& src : sources) {
    for (const auto& [rel, full] : files_of(src, o.extension)) {
      const bool held_out = is_validation_file(rel, o.val_percent);
      append_file(full, held_out ? val : train);
      if (held_out) {
        ++s.val_files;
        val_files.push_back(rel);
      } else {
        ++s.train_files;
      }
    }
  }
  TORCH_CHECK(s.train_files > 0 && s.val_files > 0, "the corpus needs files in both splits, got ", s.train_files,
              " for training and ", s.val_files, " for validation (", o.val_percent,
              "% of files are held out, by a hash of their path): pass more files or folders (--from), or change "
              "--val-percent");
  fs::create_directories(o.out);
  s.train_path = (fs::path(o.out) / "train.bin").string();
  s.val_path = (fs::path(o.out) / "val.bin").string();
  s.manifest_path = (fs::path(o.out) / "corpus.json").string();
  write_token_file(s.train_path, train);
  write_token_file(s.val_path, val);
  s.train_tokens = static_cast<int64_t>(train.size());
  s.val_tokens = static_cast<int64_t>(val.size());
  Json sources_json = Json::array();
  for (const auto& src : sources) sources_json.push_back(fs::path(src).filename().string());
  const Json manifest = {{"name", s.name},
                         {"tokens", "bytes (ids 0-255), id 256 after each file"},
                         {"vocab_needed", kCorpusVocab},
                         {"extension", o.extension},
                         {"split", "a file is held out when FNV-1a-64(relative path) % 100 < val_percent"},
                         {"val_percent", o.val_percent},
                         {"sources", sources_json},
                         {"train_files", s.train_files},
                         {"val_files", s.val_files},
                         {"train_tokens", s.train_tokens},
                         {"val_tokens", s.val_tokens},
                         {"validation_files", val_files}};
  write_text(s.manifest_path, manifest.dump(1) + "\n");
  return s;
}

}  // namespace lmscale
