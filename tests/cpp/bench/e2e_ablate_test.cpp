// `lmscale bench --ablate`: the rows switch on one piece at a time, and a tiny CPU run writes one
// record set per row (the CUDA-graph and fused switches are ignored on the CPU, so every row runs).
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "bench/e2e_ablate.h"
#include "results/reader.h"
#include "support/run_cli.h"

namespace lmscale {

namespace {
// Every switch a row can flip, as values: two rows differ by the count of unequal entries.
std::vector<int64_t> switches(const E2EConfig& c) {
  const auto& s = c.setup;
  const auto& p = s.parts;
  return {c.cuda_graph,       s.fused,           p.adamw_kernel,       p.bf16_weight_copies,   p.qkv_gemm,
          p.rope_kernel,      p.norm_kernel,     p.swiglu_kernel,      p.cross_entropy_kernel, s.optimizer_in_backward,
          s.overlaps_optimizer(), s.overlap_sm_carveout, static_cast<int64_t>(s.precision), s.fp8.qkv, s.fp8.out_proj,
          s.fp8.ffn,          s.fp8.lm_head,     s.fp8.min_dim,        s.fp8.cached_weights};
}
int changed(const E2EConfig& a, const E2EConfig& b) {
  auto x = switches(a), y = switches(b);
  int n = 0;
  for (size_t i = 0; i < x.size(); ++i) n += x[i] != y[i];
  return n;
}

void expect_one_piece_per_row(const std::vector<AblationRow>& rows) {
  ASSERT_GE(rows.size(), 3u);
  EXPECT_FALSE(rows.front().config.cuda_graph || rows.front().config.setup.fused);
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto &now = rows[i].config, &before = rows[i - 1].config;
    const int n = changed(now, before);
    // Two at once only where the row says so: `fused` with its first part; the precision with the
    // first FP8 group. An "option:" row changes the all-on config, not the row above.
    const bool pair = (now.setup.fused && !before.setup.fused) || now.setup.precision != before.setup.precision;
    if (rows[i].change.rfind("option:", 0) == 0) continue;
    EXPECT_TRUE(n == 1 || (n == 2 && pair)) << rows[i].change << ": " << n << " changes";
  }
  std::set<std::string> names;
  for (const auto& r : rows) names.insert(r.change);
  EXPECT_EQ(names.size(), rows.size());
}
}  // namespace

TEST(Ablation, RowsAddOnePieceEach) { expect_one_piece_per_row(ablation_rows(E2EConfig{})); }

TEST(Ablation, Fp8BaseAddsTheFp8GroupsAfterTheBf16Rows) {
  E2EConfig base;
  base.setup.model = model_config("small");  // d_model 768 < min_dim: a row for the layers kept in bf16
  base.setup.precision = c10::kFloat8_e4m3fn;
  auto rows = ablation_rows(base);
  expect_one_piece_per_row(rows);
  int bf16 = 0, fp8 = 0;
  for (const auto& r : rows) (r.config.setup.precision == c10::kFloat8_e4m3fn ? fp8 : bf16) += 1;
  EXPECT_EQ(bf16, 9);  // the fast path up to "all on", in bf16
  EXPECT_GE(fp8, 6);
  bool below_min_dim = false;
  for (const auto& r : rows) below_min_dim = below_min_dim || r.config.setup.fp8.min_dim == 0;
  EXPECT_TRUE(below_min_dim);
}

TEST(Ablation, TinyCpuRunWritesOneRowPerChange) {
  auto dir = testing::temp_dir("ablate");
  auto r = testing::run_cli("bench --device cpu --size tiny --context 16 --batch 2 --warmup 0 --steps 1 --ablate --out " +
                            dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::set<std::string> changes;
  for (const auto& j : read_jsonl(dir + "/e2e_ablate.jsonl")) {
    EXPECT_EQ(j["bench"], "e2e_ablate");
    EXPECT_EQ(j["cuda_graph"], false);  // what ran: no graph on the CPU
    changes.insert(j["change"].get<std::string>());
  }
  EXPECT_EQ(changes.size(), ablation_rows(E2EConfig{}).size());
}

}  // namespace lmscale
