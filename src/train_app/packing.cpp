// Where a packed row's documents end; see packing.h.
#include "train_app/packing.h"

#include <c10/util/Exception.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include "results/record.h"

namespace lmscale {

namespace fs = std::filesystem;

int64_t pack_end_of_file_id(const std::string& train_path) {
  const fs::path manifest = fs::path(train_path).parent_path() / "corpus.json";
  const std::string why_needed = "--pack cuts each context after the end-of-file id that `lmscale train corpus` "
                                 "puts after every file and records in corpus.json (tokenizer.end_of_file_id)";
  TORCH_CHECK(fs::is_regular_file(manifest), why_needed, ", and ", train_path, " has no corpus.json beside it: make "
              "the token files with `lmscale train corpus --out DIR` and pass --corpus DIR, or drop --pack");
  std::ifstream f(manifest);
  const Json j = Json::parse(f, nullptr, /*allow_exceptions=*/false);
  TORCH_CHECK(!j.is_discarded(), manifest.string(), " is not JSON: make the corpus again (lmscale train corpus), "
              "or drop --pack");
  const Json id = j.is_object() && j.contains("tokenizer") && j["tokenizer"].is_object()
                      ? j["tokenizer"].value("end_of_file_id", Json())
                      : Json();
  TORCH_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() <= 65535, why_needed, ", and ",
              manifest.string(), " records none (its tokenizer has no <|endoftext|>, so the documents run into "
              "each other unmarked): make the corpus with a tokenizer that has it (--tokenizer bytes, or bpe), "
              "or drop --pack");
  return id.get<int64_t>();
}

std::vector<int32_t> segment_offsets(const TokenFile& file, const std::vector<int64_t>& starts, int64_t context,
                                     int64_t end_of_file_id) {
  const int64_t B = static_cast<int64_t>(starts.size());
  // The offsets are int32, as the varlen attention takes them.
  TORCH_CHECK(B * context <= std::numeric_limits<int32_t>::max(), "--pack: a batch of ", B, " × ", context,
              " tokens is beyond int32 offsets; lower --batch or --context");
  std::vector<int32_t> offsets;
  for (int64_t b = 0; b < B; ++b) {
    TORCH_INTERNAL_ASSERT(starts[b] >= 0 && starts[b] + context <= file.size(), "window ", starts[b],
                          " runs past the end of ", file.path());
    offsets.push_back(static_cast<int32_t>(b * context));
    for (int64_t t = 0; t + 1 < context; ++t)
      if (file[starts[b] + t] == end_of_file_id) offsets.push_back(static_cast<int32_t>(b * context + t + 1));
  }
  offsets.push_back(static_cast<int32_t>(B * context));
  return offsets;
}

}  // namespace lmscale
