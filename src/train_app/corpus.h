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
  // "bytes" (ids 0-255, kEndOfFile after each file), "bpe" (a byte-level BPE of `vocab` ids trained on the
  // training files with Hugging Face tokenizers, python/lmscale/corpus_bpe.py), or the path of a
  // tokenizer.json to use as it is. The BPE kinds write out/tokenizer.json beside the token files.
  std::string tokenizer = "bytes";
  int64_t vocab = 10000;             // ids of the BPE that "bpe" trains
};

struct CorpusSummary {
  std::string name;                 // what the corpus is ("python-3.12-stdlib", or "files")
  int64_t train_files = 0, val_files = 0;
  int64_t train_tokens = 0, val_tokens = 0;
  int64_t vocab_needed = 0;         // a model needs a vocabulary of at least this many ids
  std::string tokenizer;            // what made the tokens, in words
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
// summary. What the options ask that cannot be done throws UsageError (the CLI exits 2), naming the
// flag and the fix, before any source is read where it can be known then: an --out that is a file or
// cannot be made, a --from that does not exist, an --ext that matches no file (with the dot's hint
// for "py"), a split left empty. A failed write (a full disk) names the file, the system's reason and
// its errno, and leaves no temporary file and no half-written corpus.
CorpusSummary make_corpus(const CorpusOptions& options);

}  // namespace lmscale
