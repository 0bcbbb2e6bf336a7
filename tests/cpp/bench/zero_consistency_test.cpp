// `bench zero --check-consistency` (issue 29, row 14): a divergence injected on one rank
// (LMSCALE_INJECT_FAULT=diverge@<size>) is caught and named with the parameter, the rank and the step;
// without it, the checks passed are in the records (consistency_checks). Two CPU ranks over Gloo.
#include <gtest/gtest.h>

#include "results/reader.h"
#include "support/run_cli.h"

namespace lmscale {
namespace {

using testing::run_cli;
using testing::temp_dir;

const std::string kZero =
    "launch -n 2 -- bench zero --backend gloo --size tiny --context 16 --batch 2 --precision fp32 "
    "--impl zero1-reduce-scatter --warmup 0 --steps 3 --check-consistency 1 --out ";

TEST(ZeroConsistency, AnInjectedDivergenceIsNamed) {
  const auto r = run_cli(kZero + temp_dir("zero-diverge"), "LMSCALE_INJECT_FAULT=diverge@tiny OMP_NUM_THREADS=1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("consistency check at step 1: parameter '"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("differs between rank 0 and rank(s) 1"), std::string::npos) << r.output;
}

TEST(ZeroConsistency, PassedChecksAreRecorded) {
  const std::string out = temp_dir("zero-checks");
  const auto r = run_cli(kZero + out, "OMP_NUM_THREADS=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto records = read_jsonl(out + "/zero.jsonl");
  ASSERT_FALSE(records.empty());
  for (const auto& j : records) EXPECT_EQ(j.value("consistency_checks", -1), 3) << j.dump();
}

}  // namespace
}  // namespace lmscale
