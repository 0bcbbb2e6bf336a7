// Mixed-precision lab: the four accumulation sums match the CS336 handout, and CPU bf16 autocast
// puts the toy model's tensors in the dtypes Python PyTorch 2.11 gives for the same model: matmuls
// bf16, loss and gradients fp32, and (unlike CUDA autocast) LayerNorm bf16, since CPU autocast
// does not list layer_norm as an fp32 op.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "profile/lab_precision.h"

namespace lmscale {
namespace {

TEST(LabAccumulation, MatchesHandoutValues) {
  auto r = run_accumulation(1000, 0.01);
  ASSERT_EQ(r.size(), 4u);
  const double expected[] = {10.0001, 9.9531, 10.0021, 10.0021};
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_NEAR(r[i].value, expected[i], 1e-3) << r[i].variant;
    EXPECT_EQ(r[i].expected, expected[i]);
  }
  // The fp16 accumulator really is worse, not equal to the others within rounding.
  EXPECT_GT(r[0].value - r[1].value, 0.04);
  EXPECT_EQ(r[1].accumulator, "fp16");
  EXPECT_EQ(r[2].added_as, "fp16");
  EXPECT_EQ(r[3].added_as, "fp32");
}

TEST(LabAccumulation, OtherCountsHaveNoHandoutValue) {
  std::mt19937 rng(std::random_device{}());
  const int64_t steps = 10 + rng() % 90;
  auto r = run_accumulation(steps, 0.5);  // 0.5 is exact in fp16 and fp32: every sum is exact
  for (const auto& v : r) {
    EXPECT_DOUBLE_EQ(v.value, 0.5 * steps) << v.variant;
    EXPECT_EQ(v.expected, 0.0);
  }
  EXPECT_THROW(run_accumulation(0, 0.01), c10::Error);
}

TEST(LabAutocast, CpuBf16Dtypes) {
  auto r = run_autocast_toy(c10::Device("cpu"), c10::kBFloat16, 20, 5, 8, std::random_device{}());
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.params, "fp32");
  EXPECT_EQ(r.fc1_out, "bf16");
  EXPECT_EQ(r.relu_out, "bf16");
  EXPECT_EQ(r.layernorm_out, "bf16");  // CUDA autocast gives fp32 here
  EXPECT_EQ(r.logits, "bf16");
  EXPECT_EQ(r.loss, "fp32");
  EXPECT_EQ(r.grads, "fp32");
}

TEST(LabAutocast, CliWritesTablesAndRecords) {
  auto dir = std::filesystem::temp_directory_path() / ("lmscale_lab_" + std::to_string(std::random_device{}()));
  const std::string cmd = std::string(LMSCALE_CLI_PATH) + " lab accumulation --out " + dir.string() + " > /dev/null && " +
                          LMSCALE_CLI_PATH + " lab autocast --device cpu --out " + dir.string() + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream md(dir / "lab_autocast.md");
  std::stringstream ss;
  ss << md.rdbuf();
  EXPECT_NE(ss.str().find("| cpu"), std::string::npos) << ss.str();
  std::ifstream jl(dir / "lab.jsonl");
  int lines = 0;
  for (std::string l; std::getline(jl, l);) lines += l.find("\"bench\":\"lab\"") != std::string::npos;
  EXPECT_GE(lines, 4 + 7);  // four sums, at least the seven bf16 dtype rows
  // Not std::filesystem::remove_all: the test binary resolves it to libtorch's copy, which crashes.
  std::system(("rm -rf '" + dir.string() + "'").c_str());
}

}  // namespace
}  // namespace lmscale
