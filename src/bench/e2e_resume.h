// `lmscale bench --resume`: results an earlier run of the same sweep left in <out>/e2e.jsonl are read
// back and kept instead of measured again, so a sweep cut by a time limit continues where it stopped.
#pragma once
#include <string>

#include "bench/e2e_tables.h"

namespace lmscale {

struct ResumeCount {
  size_t kept = 0;        // cells filled from the file
  size_t incomplete = 0;  // measured cells with records missing (cut between two writes): measured again
};

// Fills the cells of `results` that <path> already holds for the same config, impl, batch, warm-up,
// steps, device and GPU (of several invocations, the latest, told apart by their run id). Kept:
// complete measured results (step_ms, tokens_per_s and every step's time: an older lmscale wrote a
// cell's records one write() each, so a run killed in between left less) and OOM cells; failed and
// incomplete cells are measured again. Lines that do not parse are skipped.
ResumeCount resume_from(const std::string& path, SweepResults& results);

}  // namespace lmscale
