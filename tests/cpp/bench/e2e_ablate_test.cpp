// `lmscale bench --ablate`: the rows switch on one piece at a time, and a tiny CPU run writes one
// record set per row (the CUDA-graph and fused switches are ignored on the CPU, so every row runs).
#include <gtest/gtest.h>

#include <set>

#include "bench/e2e_ablate.h"
#include "results/reader.h"
#include "support/run_cli.h"

namespace lmscale {

namespace {
int switches_on(const E2EConfig& c) {
  const auto& p = c.setup.parts;
  return c.cuda_graph + c.setup.fused + p.adamw_kernel + p.bf16_weight_copies + p.qkv_gemm + p.rope_kernel +
         p.norm_kernel + p.swiglu_kernel + p.cross_entropy_kernel +
         c.setup.optimizer_in_backward;
}
}  // namespace

TEST(Ablation, RowsAddOnePieceEach) {
  auto rows = ablation_rows(E2EConfig{});
  ASSERT_GE(rows.size(), 3u);
  EXPECT_EQ(switches_on(rows.front().config), 0);
  for (size_t i = 1; i < rows.size(); ++i) {
    const int added = switches_on(rows[i].config) - switches_on(rows[i - 1].config);
    // The first fused row turns on `fused` together with its first part.
    EXPECT_TRUE(added == 1 || (added == 2 && rows[i].config.setup.fused && !rows[i - 1].config.setup.fused))
        << rows[i].change;
  }
  std::set<std::string> names;
  for (const auto& r : rows) names.insert(r.change);
  EXPECT_EQ(names.size(), rows.size());
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
