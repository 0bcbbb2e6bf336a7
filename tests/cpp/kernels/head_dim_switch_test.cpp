// The runtime -> compile-time head-dim switch (kernels/head_dim_switch.h) and the generated list it reads
// (kernels/flash_head_dims.h): pure functions, no GPU.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/flash_head_dims.h"
#include "kernels/head_dim_switch.h"

namespace lmscale::kernels {
namespace {

TEST(HeadDimSwitch, CallsTheMatchingInstantiationOnly) {
  using List = HeadDimList<16, 64, 80>;
  std::vector<int> seen;
  for (int d : {16, 64, 80}) {
    EXPECT_TRUE(with_head_dim(List{}, d, [&](auto dim) {
      static_assert(decltype(dim)::value > 0, "a compile-time constant");
      seen.push_back(decltype(dim)::value);
    }));
  }
  EXPECT_EQ(seen, (std::vector<int>{16, 64, 80}));
  EXPECT_FALSE(with_head_dim(List{}, 32, [&](auto) { seen.push_back(-1); }));
  EXPECT_FALSE(with_head_dim(HeadDimList<>{}, 64, [&](auto) { seen.push_back(-1); }));
  EXPECT_EQ(seen.size(), 3u) << "f ran for a head dim outside the list";
}

TEST(HeadDimSwitch, TheErrorNamesCallerFamilyAndList) {
  try {
    with_head_dim_or_throw(HeadDimList<16, 32>{}, 96, "run_x", "fp32", [](auto) {});
    FAIL() << "no throw for a head dim outside the list";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "run_x: head_dim 96 has no fp32 kernel; supported: 16, 32");
  }
  int ran = 0;
  with_head_dim_or_throw(HeadDimList<16, 32>{}, 32, "run_x", "fp32", [&](auto d) { ran = decltype(d)::value; });
  EXPECT_EQ(ran, 32);
}

TEST(HeadDimSwitch, ListsAreAscendingAndHopperIsASubset) {
  EXPECT_TRUE(HeadDimList<>::str().empty());
  EXPECT_FALSE(HeadDimList<>::contains(0));
  ASSERT_GT(FlashHeadDims::kValues.size(), 0u);
  for (size_t i = 1; i < FlashHeadDims::kValues.size(); ++i) EXPECT_LT(FlashHeadDims::kValues[i - 1], FlashHeadDims::kValues[i]);
  for (int d : HopperHeadDims::kValues) EXPECT_TRUE(FlashHeadDims::contains(d)) << d;
}

}  // namespace
}  // namespace lmscale::kernels
