// The ablation table behind `lmscale bench --ablate`: one config measured with the fast-path pieces
// switched on one at a time, in one process, so each row's gain over the row above is read off the
// same run. Rows: all off (eager, unfused) → + CUDA graph → + AdamW kernel → + bf16 weight copies →
// + one QKV GEMM → + QKV split and RoPE in one kernel → + residual add + RMSNorm kernel → + SwiGLU
// gate kernel → + cross-entropy kernel (= everything on) → + optimizer in backward (an option).
// Each row: step time, MFU, peak memory, the CUDA-graph note.
#pragma once
#include <string>
#include <vector>

#include "bench/e2e_bench.h"

namespace lmscale {

struct AblationRow {
  std::string change;  // "all off", "+ CUDA graph", ...
  E2EConfig config;
};

// The rows for one base config (its fused/cuda_graph switches are overwritten row by row).
std::vector<AblationRow> ablation_rows(const E2EConfig& base);

// Runs every row of every base config, appends records (bench "e2e_ablate", field "change") to
// <out>/e2e_ablate.jsonl, writes <out>/e2e_ablate.md and returns the table.
std::string run_ablation(const std::vector<E2EConfig>& bases, const std::string& out_dir);

}  // namespace lmscale
