// Bucket assignment is a pure function: checked here without any process group.
#include <gtest/gtest.h>

#include <random>

#include "distributed/bucketing.h"

using lmscale::distributed::assign_buckets;
using lmscale::distributed::TensorInfo;
using Buckets = std::vector<std::vector<size_t>>;

namespace {
std::vector<TensorInfo> floats(std::vector<int64_t> numels) {
  std::vector<TensorInfo> t;
  for (auto n : numels) t.push_back({n, c10::kFloat, c10::Device("cpu"), true});
  return t;
}
}  // namespace

TEST(Bucketing, ZeroCapGivesOneTensorPerBucketInReverse) {
  EXPECT_EQ(assign_buckets(floats({3, 5, 7}), 0, true), (Buckets{{2}, {1}, {0}}));
}

TEST(Bucketing, CapClosesBucketBeforeOverflow) {
  // 4-byte floats: 10 + 10 elements = 80 bytes fit a cap of 80, the third does not.
  EXPECT_EQ(assign_buckets(floats({10, 10, 10}), 80, false), (Buckets{{0, 1}, {2}}));
  EXPECT_EQ(assign_buckets(floats({10, 10, 10}), 79, false), (Buckets{{0}, {1}, {2}}));
  EXPECT_EQ(assign_buckets(floats({10, 10, 10}), 79, true), (Buckets{{2}, {1}, {0}}));
}

TEST(Bucketing, OversizedTensorGetsItsOwnBucket) {
  EXPECT_EQ(assign_buckets(floats({1, 100, 1, 1}), 16, false), (Buckets{{0}, {1}, {2, 3}}));
}

TEST(Bucketing, UnlimitedCapGivesOneBucketPerDtypeAndDevice) {
  auto t = floats({4, 4, 4, 4});
  t[1].dtype = c10::kBFloat16;
  t[2].included = false;  // frozen parameter: never bucketed
  auto b = assign_buckets(t, lmscale::distributed::kUnlimitedBucketBytes, true);
  EXPECT_EQ(b, (Buckets{{3, 0}, {1}}));
}

TEST(Bucketing, RandomSizesRespectCapAndCoverEachIncludedTensorOnce) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<TensorInfo> t;
    int n = 1 + rng() % 30;
    for (int i = 0; i < n; ++i)
      t.push_back({int64_t(rng() % 1000), (rng() % 3 == 0) ? c10::kHalf : c10::kFloat, c10::Device("cpu"),
                   rng() % 5 != 0});
    int64_t cap = rng() % 3000;
    auto buckets = assign_buckets(t, cap, true);
    std::vector<int> seen(n, 0);
    size_t last_first = SIZE_MAX;
    for (auto& b : buckets) {
      ASSERT_FALSE(b.empty());
      int64_t bytes = 0;
      for (size_t i : b) {
        ++seen[i];
        EXPECT_EQ(t[i].dtype, t[b[0]].dtype) << "bucket mixes dtypes";
        bytes += t[i].numel * int64_t(c10::elementSize(t[i].dtype));
      }
      if (b.size() > 1) { EXPECT_LE(bytes, cap) << "multi-tensor bucket over the cap"; }
      // Reverse order: each bucket opens at a lower index than the previous one, and indices
      // inside a bucket decrease.
      EXPECT_LT(b[0], last_first);
      last_first = b[0];
      for (size_t k = 1; k < b.size(); ++k) EXPECT_LT(b[k], b[k - 1]);
    }
    for (int i = 0; i < n; ++i) EXPECT_EQ(seen[i], t[i].included ? 1 : 0) << "tensor " << i;
  }
}

TEST(Bucketing, RejectsNegativeCap) {
  EXPECT_THROW(assign_buckets(floats({1}), -1, true), c10::Error);
  EXPECT_THROW(lmscale::distributed::bucket_cap_bytes(-2.0), c10::Error);
  EXPECT_EQ(lmscale::distributed::bucket_cap_bytes(1.0), 1 << 20);
}

TEST(Bucketing, FirstBucketHasItsOwnCap) {
  // Reverse order visits 3, 2, 1, 0; the first bucket closes at 40 bytes, the rest at 80.
  EXPECT_EQ(assign_buckets(floats({10, 10, 10, 10}), 80, true, 40), (Buckets{{3}, {2, 1}, {0}}));
  EXPECT_EQ(assign_buckets(floats({10, 10, 10, 10}), 80, true), (Buckets{{3, 2}, {1, 0}}));
}

TEST(Bucketing, ExplicitOrderPutsUnlistedTensorsLastInReverse) {
  using lmscale::distributed::assign_buckets_in_order;
  EXPECT_EQ(assign_buckets_in_order(floats({1, 1, 1, 1}), {1, 3}, 0), (Buckets{{1}, {3}, {2}, {0}}));
  EXPECT_THROW(assign_buckets_in_order(floats({1, 1}), {1, 1}, 0), c10::Error);
  EXPECT_THROW(assign_buckets_in_order(floats({1, 1}), {2}, 0), c10::Error);
}
