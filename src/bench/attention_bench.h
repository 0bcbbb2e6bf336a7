// `lmscale bench attention`: (a) the plain-attention sweep (batch 8, no head dim), (b) the FlashAttention
// benchmark (batch 1, causal, lmscale flash vs plain attention vs SDPA's flash / cuDNN / mem-efficient
// backends, same process), (c) the leaderboard config. Records go to <out>/attention.jsonl and
// <out>/attention.md (bench "attention"); the CLI file only parses options into AttentionBenchOptions.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lmscale {

// The implementations compared; names are the records' `impl`. lmscale-hopper / lmscale-fa2 (lmscale-flash
// with the kernel path forced, ops::set_flash_path) run only when named with --impl.
inline const std::vector<std::string>& attention_impls() {
  static const std::vector<std::string> names = {"lmscale-flash", "lmscale-hopper",     "lmscale-fa2", "sdpa-flash",
                                                 "sdpa-cudnn",    "sdpa-mem-efficient", "torch-naive"};
  return names;
}
inline const std::vector<std::string>& attention_default_impls() {
  static const std::vector<std::string> names = {"lmscale-flash", "sdpa-flash", "sdpa-cudnn", "sdpa-mem-efficient",
                                                 "torch-naive"};
  return names;
}

struct AttentionBenchOptions {
  std::string mode = "flash";      // sweep | flash | leaderboard
  std::string device = "auto";
  std::vector<int64_t> seqs;       // empty: the mode's default grid
  std::vector<int64_t> head_dims;  // empty: {16, 32, 64, 128}
  std::vector<std::string> dtypes; // empty: sweep {fp32}, flash {bf16, fp32}, leaderboard {bf16}
  std::vector<std::string> impls;  // empty: all (sweep: torch-naive only)
  int64_t batch = 0;               // 0: the mode's default (sweep 8, flash 1, leaderboard 1)
  int64_t heads = 0;               // 0: sweep none, flash 1, leaderboard 16
  bool causal = true;              // flash and leaderboard are causal; the sweep uses --no-causal by default
  int warmup = 5;
  int iters = 0;                   // 0: sweep 100, flash 20, leaderboard 50
  std::string out = "results";
};

// Runs the mode's grid, prints a progress line per config and the markdown table, appends records.
void run_attention_bench(const AttentionBenchOptions& opts);

// FLOPs by the FlashAttention convention: forward 4·B·H·S²·D, halved when causal; backward 2.5x forward.
double attention_fwd_flops(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, bool causal);

}  // namespace lmscale
