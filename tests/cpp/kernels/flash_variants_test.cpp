// The built FlashAttention variants: kernels/flash_variants.h, written by CMake from LMSCALE_FA_HEADDIMS /
// LMSCALE_FA_DTYPES, is the one list; the dispatch and the ops' checks must answer from it exactly.
// Pure functions, no GPU needed (skipped in builds without the kernels).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>
#include <string>

#include "kernels/flash_head_dims.h"
#include "kernels/flash_variants.h"
#include "ops/flash_attention.h"

#ifdef LMSCALE_HAS_KERNELS
#include "kernels/flash_params.h"
#endif

namespace lmscale {
namespace {

const std::set<int> kBuiltHeadDims(kernels::BuiltHeadDims::kValues.begin(), kernels::BuiltHeadDims::kValues.end());
#define LMSCALE_FA_LIST_DTYPE(name, NAME) #name,
const std::set<std::string> kBuiltDtypes = {LMSCALE_FA_FOR_EACH_DTYPE(LMSCALE_FA_LIST_DTYPE)};
#undef LMSCALE_FA_LIST_DTYPE

TEST(FlashVariants, TheBuiltListIsNotEmpty) {
  EXPECT_FALSE(kBuiltHeadDims.empty()) << "CMake wrote no head dim into flash_variants.h";
  EXPECT_FALSE(kBuiltDtypes.empty()) << "CMake wrote no dtype into flash_variants.h";
}

TEST(FlashVariants, OpsAcceptExactlyTheBuiltHeadDimsAndDtypes) {
#ifndef LMSCALE_HAS_KERNELS
  GTEST_SKIP() << "built without CUDA kernels";
#else
  const std::pair<torch::ScalarType, const char*> dtypes[] = {{torch::kBFloat16, "bf16"}, {torch::kHalf, "fp16"}};
  int accepted = 0;
  for (const auto& [dt, name] : dtypes) {
    for (int d = 1; d <= 256; ++d) {
      const bool built = kBuiltHeadDims.count(d) && kBuiltDtypes.count(name);
      EXPECT_EQ(ops::flash_kernel_available(dt, d), built) << name << " head dim " << d;
      accepted += built;
    }
  }
  EXPECT_GT(accepted, 0);
#endif
}

TEST(FlashVariants, TheBuiltListIsPartOfTheOneListAndFp32ServesAllOfIt) {
  for (int d : kBuiltHeadDims) EXPECT_TRUE(kernels::FlashHeadDims::contains(d)) << d << " is built but not generated";
#ifndef LMSCALE_HAS_KERNELS
  GTEST_SKIP() << "built without CUDA kernels";
#else
  for (int d = 1; d <= 256; ++d)
    EXPECT_EQ(ops::flash_kernel_available(torch::kFloat, d), kernels::FlashHeadDims::contains(d)) << "fp32 head dim " << d;
#endif
}

TEST(FlashVariants, TheErrorMessageListsEveryBuiltVariant) {
#ifndef LMSCALE_HAS_KERNELS
  GTEST_SKIP() << "built without CUDA kernels";
#else
  const std::string list = kernels::flash_supported_list();
  std::string dims;
  for (int d : kBuiltHeadDims) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
  EXPECT_NE(list.find("{" + dims + "}"), std::string::npos) << list;
  for (const auto& name : kBuiltDtypes) EXPECT_NE(list.find(name), std::string::npos) << list;
#endif
}

}  // namespace
}  // namespace lmscale
