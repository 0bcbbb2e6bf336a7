// `lmscale train --pack`: where the documents of a batch's rows end. Each row of `context` tokens is cut
// into segments after every end-of-file id (the id `lmscale train corpus` puts after each file and records
// in corpus.json); the model keeps attention within a segment (model/attention.h, PackedSegments). Why
// positions run on through the row and the loss stays everywhere: docs/training.md, Packing documents.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train_app/token_file.h"

namespace lmscale {

// The end-of-file id of the corpus a training file belongs to: `tokenizer.end_of_file_id` of the
// corpus.json beside it. Throws naming the file and the fix (make the corpus with `lmscale train corpus`,
// or drop --pack) when there is none: no corpus.json, or a tokenizer without <|endoftext|>, whose
// documents run into each other unmarked.
int64_t pack_end_of_file_id(const std::string& train_path);

// The segments of the windows at `starts` (batch_of's rows, `context` tokens each) as offsets into the
// B·T positions flattened row by row: segment s is [offsets[s], offsets[s + 1]), from 0 to B·T. Every
// row starts a segment, so none crosses rows; a new one starts after each end-of-file id that is not the
// row's last token (the id is its document's last token; the next token begins the next document). A
// row without the id is one segment.
std::vector<int32_t> segment_offsets(const TokenFile& file, const std::vector<int64_t>& starts, int64_t context,
                                     int64_t end_of_file_id);

}  // namespace lmscale
