// The ablation table behind `lmscale bench --ablate`: one config measured with the fast-path pieces
// switched on one at a time, in one process, so each row's gain over the row above is read off the
// same run. Rows: all off (eager, unfused) → + CUDA graph → + AdamW kernel → + bf16 weight copies →
// + one QKV GEMM → + QKV split and RoPE in one kernel → + residual add + RMSNorm kernel → + SwiGLU
// gate kernel → + cross-entropy kernel (bf16, everything on) → for an fp8 base: FP8 for the FFN, the
// QKV and the output projection in turn → + FP8 weights cast once, after their update → + the
// optimizer overlapped with backward, with 8/16/32 SMs left out of the GEMMs → options, each on the
// all-on config: FP8 LM head, FP8 below min_dim (where the default keeps bf16), the optimizer in
// backward on one stream.
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
