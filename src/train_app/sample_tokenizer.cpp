// The checkpoint's tokenizer; see sample_tokenizer.h.
#include "train_app/sample_tokenizer.h"

#include <c10/util/Exception.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "core/python_module.h"
#include "results/writer.h"
#include "train_app/corpus.h"

namespace lmscale {

namespace fs = std::filesystem;

namespace {

// Runs python -m lmscale.tokenize_text with `input` on stdin and returns its one JSON answer.
Json run_tokenizer(const std::string& file, const std::string& direction, const std::string& input) {
  const fs::path in = fs::temp_directory_path() / ("lmscale-sample-" + std::to_string(::getpid()) + ".in");
  write_text(in.string(), input);
  Json answer;
  const ModuleRun run = run_json_lines_module("lmscale.tokenize_text", {"--tokenizer", file, direction}, in.string(),
                                              "  ", [&](const std::string& line) {
                                                answer = Json::parse(line, nullptr, /*allow_exceptions=*/false);
                                                return !answer.is_discarded();
                                              });
  std::remove(in.c_str());
  TORCH_CHECK(run.proc.ok() && answer.is_object(), "the tokenizer (python -m lmscale.tokenize_text ", direction,
              ") failed: ", run.proc.describe(), run.tail.empty() ? "" : ": " + run.tail, ". ", python_fix());
  return answer;
}

}  // namespace

CheckpointTokenizer::CheckpointTokenizer(const CheckpointInfo& c) {
  const Json t = c.manifest.value("corpus", Json::object()).value("tokenizer", Json::object());
  kind_ = t.value("kind", "bytes");
  vocab_ = t.value("vocab_size", int64_t{0});
  if (t.contains("end_of_file_id") && t["end_of_file_id"].is_number_integer())
    end_of_text_ = t["end_of_file_id"].get<int64_t>();
  if (kind_ == "bytes") {
    if (!end_of_text_) end_of_text_ = kEndOfFile;
    return;
  }
  TORCH_CHECK(kind_ == "bpe" || kind_ == "tokenizer.json", "checkpoint ", c.path, " records a tokenizer of kind ",
              kind_, ", which this lmscale does not know (bytes, bpe, tokenizer.json): sample with the lmscale that wrote it");
  file_ = (fs::path(c.path) / "tokenizer.json").string();
  TORCH_CHECK(fs::is_regular_file(file_), "checkpoint ", c.path, " lacks its tokenizer.json (the corpus's tokenizer, ",
              kind_, "): copy the corpus's tokenizer.json into it, or pass another checkpoint");
}

std::vector<int64_t> CheckpointTokenizer::encode(const std::string& text) const {
  if (kind_ == "bytes") {
    std::vector<int64_t> ids;
    for (unsigned char ch : text) ids.push_back(ch);
    return ids;
  }
  return run_tokenizer(file_, "encode", text).at("ids").get<std::vector<int64_t>>();
}

std::string CheckpointTokenizer::decode(const std::vector<int64_t>& ids) const {
  if (kind_ == "bytes") {
    std::string text;
    // Ids past the bytes (the end-of-file id, or ids the byte corpus never holds) have no text.
    for (int64_t id : ids)
      if (id >= 0 && id < 256) text += static_cast<char>(id);
    return text;
  }
  return run_tokenizer(file_, "decode", Json(ids).dump()).at("text").get<std::string>();
}

std::string CheckpointTokenizer::describe() const {
  if (kind_ == "bytes") return "bytes as tokens";
  return (kind_ == "bpe" ? "BPE of " + std::to_string(vocab_) + " ids" : "the corpus's tokenizer") + " (tokenizer.json)";
}

}  // namespace lmscale
