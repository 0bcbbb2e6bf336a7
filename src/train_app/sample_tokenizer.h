// The tokenizer a checkpoint's corpus was made with (its manifest's corpus.tokenizer), for `lmscale
// sample`: bytes as tokens (the UTF-8 bytes of the text are the ids 0-255, id 256 ends a file), or the
// checkpoint's own copy of the corpus's tokenizer.json, run by Hugging Face tokenizers (python -m
// lmscale.tokenize_text), the library that made the token files, so the ids are the training's.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "train_app/checkpoint.h"

namespace lmscale {

class CheckpointTokenizer {
 public:
  // Throws naming the checkpoint and the fix when its tokenizer is of an unknown kind or missing.
  explicit CheckpointTokenizer(const CheckpointInfo& checkpoint);
  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& ids) const;
  // The id that ends a document in the training data (generation stops there), when there is one.
  std::optional<int64_t> end_of_text() const { return end_of_text_; }
  std::string describe() const;  // "bytes as tokens" or "BPE of 10000 ids (tokenizer.json)"

 private:
  std::string kind_, file_;
  int64_t vocab_ = 0;
  std::optional<int64_t> end_of_text_;
};

}  // namespace lmscale
