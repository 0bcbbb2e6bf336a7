// The loss comparison of `lmscale train` from records alone: lmscale against the reference at its
// precision and against lmscale bf16, the largest difference after warm-up against the 1 % bound,
// runs without a curve left out.
#include <gtest/gtest.h>

#include "train_app/train_compare.h"

namespace lmscale {
namespace {

Json run(const std::string& impl, const std::string& precision) {
  return Json{{"impl", impl}, {"precision", precision}, {"size", "tiny"}, {"context", 32}, {"batch", 4},
              {"steps", 20}, {"corpus", "files"}};
}

Json val(const Json& r, int64_t step, double v) {
  Json j = r;
  j.update(Json{{"bench", "train"}, {"metric", "val_loss"}, {"status", "ok"}, {"step", step}, {"value", v}});
  return j;
}

TEST(TrainCompare, PairsDifferencesAndTheBound) {
  const Json ours = run("lmscale", "bf16"), ref = run("torch-eager", "bf16"), fp8 = run("lmscale", "fp8"),
             skipped = run("torch-eager", "fp8");
  std::vector<Json> records{val(ours, 0, 9.0), val(ref, 0, 9.0), val(fp8, 0, 9.0),
                            val(ours, 10, 2.0), val(ref, 10, 2.1), val(fp8, 10, 2.05),  // in the warm-up
                            val(ours, 20, 1.0), val(ref, 20, 1.005), val(fp8, 20, 1.03)};
  records.push_back(val(ours, 20, 1.001));  // a later record of the same step wins
  const std::string md = loss_comparison(records, {ours, ref, fp8, skipped}, /*lr_warmup=*/10);
  EXPECT_EQ(md.find("torch-eager fp8"), std::string::npos) << md;  // no curve: no column, no pair
  EXPECT_NE(md.find("| lmscale bf16 vs torch-eager bf16 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| lmscale fp8 vs lmscale bf16 |"), std::string::npos) << md;
  // Step 10 is in the warm-up (−4.76 %, not counted); step 20: (1.001 − 1.005) / 1.005 = −0.40 %.
  EXPECT_NE(md.find("-4.76 %"), std::string::npos) << md;
  EXPECT_NE(md.find("lmscale bf16 vs torch-eager bf16: largest difference after warm-up 0.40 % (step 20, 1 "
                    "evaluations): within the 1 % bound"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("lmscale fp8 vs lmscale bf16: largest difference after warm-up 2.90 % (step 20, 1 evaluations): "
                    "**outside** the 1 % bound"),
            std::string::npos)
      << md;
}

}  // namespace
}  // namespace lmscale
