// A real corpus that needs no download: text files (by default the Python standard library's own
// sources, shipped with every interpreter) turned into two token files, train.bin and val.bin, split
// by file, with bytes as tokens. What the token files are is token_file.h's; how a run reads them,
// data_order.h's.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lmscale {

// Tokens are bytes (ids 0..255); each file ends with this id, so no window runs from one file into
// the next unmarked. A model needs a vocabulary of at least kCorpusVocab.
inline constexpr uint16_t kEndOfFile = 256;
inline constexpr int64_t kCorpusVocab = 257;

struct CorpusOptions {
  std::vector<std::string> sources;  // files and folders; empty: the Python standard library
  std::string extension = ".py";     // files taken from folders (files named directly are always taken)
  std::string out;                   // folder for train.bin, val.bin, corpus.json
  int64_t val_percent = 5;           // share of files (not bytes) held out for validation
};

struct CorpusSummary {
  std::string name;                 // what the corpus is ("python-3.12-stdlib", or "files")
  int64_t train_files = 0, val_files = 0;
  int64_t train_tokens = 0, val_tokens = 0;
  std::string train_path, val_path, manifest_path;
};

// The folder of the interpreter's standard library (`sysconfig.get_paths()["stdlib"]` of
// $LMSCALE_PYTHON, else python3) and a name for it; throws with the fix when it cannot be asked.
std::pair<std::string, std::string> python_stdlib();

// Which split a file belongs to: a fixed hash of its path relative to its source (so the split does
// not move when files are added elsewhere, and is the same on every machine).
bool is_validation_file(const std::string& relative_path, int64_t val_percent);

// Walks the sources (in sorted order; folders named site-packages, dist-packages or __pycache__ are
// skipped: they hold what was installed, not the library), writes the two token files and
// corpus.json (the sources, the split rule, the counts and the validation files), and returns the
// summary. Throws when a split would be empty, naming the fix.
CorpusSummary make_corpus(const CorpusOptions& options);

}  // namespace lmscale
