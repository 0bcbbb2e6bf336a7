// `lmscale bench --resume`: results an earlier run of the same sweep left in <out>/e2e.jsonl are read
// back and kept instead of measured again, so a sweep cut by a time limit continues where it stopped.
#pragma once
#include <string>

#include "bench/e2e_tables.h"

namespace lmscale {

// Fills the cells of `results` that <path> already holds for the same config, impl, batch, warm-up,
// steps, device and GPU (of several invocations, the latest). Kept: measured results (with their
// step_ms record: a run killed while appending may have left less) and OOM cells; failed cells are
// measured again. Lines that do not parse are skipped. Returns how many cells it filled.
size_t resume_from(const std::string& path, SweepResults& results);

}  // namespace lmscale
