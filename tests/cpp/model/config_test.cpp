// Parameter counts of the five sizes of docs/spec.md §1 (closed form, nothing allocated) and config checks.
#include <gtest/gtest.h>

#include "model/config.h"
#include "model/transformer.h"

namespace lmscale {

TEST(ModelConfig, ParameterCountsMatchReferenceTable) {
  // docs/spec.md §1, in millions with one decimal.
  const std::vector<std::pair<std::string, double>> expected = {
      {"small", 128.6}, {"medium", 423.2}, {"large", 969.4}, {"xl", 1998.2}, {"2.7B", 3406.8}};
  for (const auto& [name, millions] : expected) {
    auto cfg = model_config(name);
    EXPECT_NEAR(cfg.param_count() / 1e6, millions, 0.05) << name;
  }
}

TEST(ModelConfig, FormulaMatchesAllocatedModel) {
  auto cfg = model_config("tiny");
  TransformerLM model(cfg);
  int64_t n = 0;
  for (const auto& p : model->parameters()) n += p.numel();
  EXPECT_EQ(n, cfg.param_count());
}

TEST(ModelConfig, HeadDimOf27BIs80) { EXPECT_EQ(model_config("2.7B").d_head(), 80); }

TEST(ModelConfig, UnknownSizeNamesTheChoices) {
  try {
    model_config("gigantic");
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    std::string m = e.what_without_backtrace();
    EXPECT_NE(m.find("gigantic"), std::string::npos);
    EXPECT_NE(m.find("small"), std::string::npos);
  }
}

TEST(ModelConfig, RejectsIndivisibleHeads) {
  ModelConfig c;
  c.d_model = 100;
  c.num_heads = 3;
  EXPECT_THROW(c.validate(), c10::Error);
}

}  // namespace lmscale
