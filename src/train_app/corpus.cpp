// The byte-level corpus maker; see corpus.h.
#include "train_app/corpus.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "core/error.h"
#include "core/process.h"
#include "core/python_module.h"
#include "results/record.h"
#include "results/writer.h"
#include "train_app/token_file.h"

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

// The --out folder, made now (before any source is read), or a UsageError saying why it cannot be.
// True when this call made it (a usage error found later then takes it away again).
bool make_out_folder(const std::string& out) {
  if (out.empty()) throw UsageError("--out: no output folder given; pass the folder for train.bin, val.bin and corpus.json");
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::is_directory(out, ec))
    throw UsageError("--out " + out + " is a file, not a folder: pass a folder for train.bin, val.bin and corpus.json "
                     "(it is made if missing)");
  const bool existed = fs::exists(out, ec);
  fs::create_directories(out, ec);
  if (ec)
    throw UsageError("--out " + out + ": cannot make that folder (" + ec.message() + "); pass a folder you can write to");
  return !existed;
}

// Each source exists; a missing one is a usage error naming it.
void check_sources(const std::vector<std::string>& sources) {
  for (const auto& src : sources) {
    std::error_code ec;
    if (!fs::is_regular_file(src, ec) && !fs::is_directory(src, ec))
      throw UsageError("--from " + src + " is neither a file nor a folder (" +
                       (fs::exists(src, ec) ? "a special file" : "it does not exist") + ")");
  }
}

// Writes the token files and the manifest, each through a temporary file renamed into place
// (results/writer.h: a failure removes the temporary file and names the path, the system's reason and its
// errno). A failure after an earlier file of this corpus was put in place (`written`: those the
// tokenizer wrote before) removes that one too, so the folder never holds a new train.bin beside an old
// val.bin.
void write_corpus_files(const std::vector<std::pair<std::string, std::string>>& files,
                        std::vector<std::string> written = {}) {
  for (const auto& [path, bytes] : files) {
    try {
      write_text(path, bytes);
    } catch (const std::exception& e) {
      for (const auto& done : written) std::remove(done.c_str());
      int64_t total = 0;
      for (const auto& f : files) total += static_cast<int64_t>(f.second.size());
      const std::string need = total < 1000000 ? std::to_string((total + 999) / 1000) + " kB"
                                               : std::to_string((total + 999999) / 1000000) + " MB";
      throw std::runtime_error(std::string(e.what()) + ". The corpus needs " + need + " in all" + (written.empty() ? "" : "; the files of it already written were removed") +
                               ", and no temporary file was left");
    }
    written.push_back(path);
  }
}

// The tokenizer option: "bytes", "bpe", or an existing tokenizer.json; anything else is a usage error.
void check_tokenizer(const CorpusOptions& o) {
  if (o.tokenizer == "bytes") return;
  if (o.tokenizer == "bpe") {
    if (o.vocab < 257 || o.vocab > 65536)
      throw UsageError("--vocab must be between 257 (the 256 bytes and <|endoftext|>) and 65536 (uint16 token ids), "
                       "got " + std::to_string(o.vocab));
    return;
  }
  std::error_code ec;
  if (!fs::is_regular_file(o.tokenizer, ec))
    throw UsageError("--tokenizer " + o.tokenizer + ": expected bytes, bpe, or the path of a tokenizer.json (Hugging "
                     "Face tokenizers); " + (fs::exists(o.tokenizer, ec) ? "that is not a file" : "no such file"));
}

// Tokenizes with python/lmscale/corpus_bpe.py (which writes tokenizer.json, train.bin and val.bin, each
// renamed into place, and answers with one JSON line) and returns its answer.
Json tokenize_with_python(const CorpusOptions& o, const std::vector<std::string>& train_files,
                          const std::vector<std::string>& val_files) {
  const std::string list = (fs::path(o.out) / ".corpus_files.json").string();
  write_text(list, Json({{"train", train_files}, {"val", val_files}}).dump() + "\n");
  std::vector<std::string> args{"--files", list, "--out", o.out};
  if (o.tokenizer == "bpe") {
    args.insert(args.end(), {"--vocab", std::to_string(o.vocab)});
  } else {
    args.insert(args.end(), {"--tokenizer", fs::absolute(o.tokenizer).string()});
  }
  Json answer;
  const ModuleRun run = run_json_lines_module("lmscale.corpus_bpe", args, "", "  ", [&](const std::string& line) {
    answer = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    return !answer.is_discarded();
  });
  std::remove(list.c_str());
  TORCH_CHECK(run.proc.ok() && answer.is_object(), "tokenizing the corpus (python -m lmscale.corpus_bpe) failed: ",
              run.proc.describe(), run.tail.empty() ? "" : ": " + run.tail);
  return answer;
}

std::string as_bytes(const std::vector<uint16_t>& ids) {  // the token file's bytes (host order: little-endian)
  return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(uint16_t));
}

// The corpus from its checked options into its made folder (make_corpus's work after the checks).
CorpusSummary fill_corpus(const CorpusOptions& o);

}  // namespace

CorpusSummary make_corpus(const CorpusOptions& o) {
  if (o.val_percent <= 0 || o.val_percent >= 100)
    throw UsageError("--val-percent must be between 1 and 99, got " + std::to_string(o.val_percent));
  check_sources(o.sources);
  check_tokenizer(o);
  const bool made = make_out_folder(o.out);
  try {
    return fill_corpus(o);
  } catch (const UsageError&) {
    std::error_code ec;
    if (made) fs::remove(o.out, ec);  // only while empty: a usage error leaves no folder behind
    throw;
  }
}

namespace {

CorpusSummary fill_corpus(const CorpusOptions& o) {
  const bool bytes = o.tokenizer == "bytes";
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
  std::vector<std::string> train_paths, val_paths;  // the BPE kinds: the files, read by Python
  Json val_files = Json::array();
  for (const auto& src : sources) {
    for (const auto& [rel, full] : files_of(src, o.extension)) {
      const bool held_out = is_validation_file(rel, o.val_percent);
      if (bytes) {
        append_file(full, held_out ? val : train);
      } else {
        (held_out ? val_paths : train_paths).push_back(fs::absolute(full).string());
      }
      if (held_out) {
        ++s.val_files;
        val_files.push_back(rel);
      } else {
        ++s.train_files;
      }
    }
  }
  if (s.train_files + s.val_files == 0) {
    std::string from;
    for (const auto& src : sources) from += (from.empty() ? "" : ", ") + src;
    const bool no_dot = !o.extension.empty() && o.extension[0] != '.';
    throw UsageError("--ext " + o.extension + ": no file in " + from + " has that extension" +
                     (no_dot ? "; an extension starts with a dot: --ext ." + o.extension
                             : "; pass the extension of your text files (--ext .txt) or name files with --from"));
  }
  if (s.train_files == 0 || s.val_files == 0)
    throw UsageError("the corpus needs files in both splits, got " + std::to_string(s.train_files) + " for training and " +
                     std::to_string(s.val_files) + " for validation (" + std::to_string(o.val_percent) +
                     "% of files are held out, by a hash of their path): pass more files or folders (--from), or "
                     "change --val-percent");
  s.train_path = (fs::path(o.out) / "train.bin").string();
  s.val_path = (fs::path(o.out) / "val.bin").string();
  s.manifest_path = (fs::path(o.out) / "corpus.json").string();
  Json tokenizer = {{"kind", "bytes"}, {"vocab_size", kCorpusVocab}, {"end_of_file_id", kEndOfFile}};
  std::string tokens = "bytes (ids 0-255), id 256 after each file";
  s.vocab_needed = kCorpusVocab;
  s.tokenizer = "bytes as tokens";
  if (bytes) {
    s.train_tokens = static_cast<int64_t>(train.size());
    s.val_tokens = static_cast<int64_t>(val.size());
  } else {
    const Json answer = tokenize_with_python(o, train_paths, val_paths);
    s.train_tokens = answer.at("train_tokens").get<int64_t>();
    s.val_tokens = answer.at("val_tokens").get<int64_t>();
    s.vocab_needed = answer.at("vocab_size").get<int64_t>();
    s.tokenizer = answer.at("made_by").get<std::string>();
    const Json eot = answer.at("end_of_text_id");
    tokenizer = {{"kind", o.tokenizer == "bpe" ? "bpe" : "tokenizer.json"},
                 {"file", "tokenizer.json"},
                 {"sha256", answer.at("tokenizer_sha256")},
                 {"vocab_size", s.vocab_needed},
                 {"made_by", s.tokenizer},
                 {"end_of_file_id", eot}};
    tokens = "ids of tokenizer.json (Hugging Face tokenizers)" +
             (eot.is_null() ? std::string(", nothing between files") : ", id " + eot.dump() + " (<|endoftext|>) after each file");
  }
  Json sources_json = Json::array();
  for (const auto& src : sources) sources_json.push_back(fs::path(src).filename().string());
  const Json manifest = {{"name", s.name},
                         {"tokens", tokens},
                         {"tokenizer", tokenizer},
                         {"vocab_needed", s.vocab_needed},
                         {"extension", o.extension},
                         {"split", "a file is held out when FNV-1a-64(relative path) % 100 < val_percent"},
                         {"val_percent", o.val_percent},
                         {"sources", sources_json},
                         {"train_files", s.train_files},
                         {"val_files", s.val_files},
                         {"train_tokens", s.train_tokens},
                         {"val_tokens", s.val_tokens},
                         {"validation_files", val_files}};
  if (bytes) {
    write_corpus_files({{s.train_path, as_bytes(train)}, {s.val_path, as_bytes(val)},
                        {s.manifest_path, manifest.dump(1) + "\n"}});
  } else {
    write_corpus_files({{s.manifest_path, manifest.dump(1) + "\n"}},
                       {s.train_path, s.val_path, (fs::path(o.out) / "tokenizer.json").string()});
  }
  return s;
}

}  // namespace

}  // namespace lmscale
