// Note [tensor map cache] (src/kernels/hopper/recent_cache.h) on the CPU: a repeated key is a hit that
// returns the stored value without calling make; a key differing in any byte misses; a failed make
// stores nothing; a key that lands on an occupied slot evicts it and the evicted key misses again.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/hopper/recent_cache.h"

namespace lmscale {
namespace {

using kernels::hopper::RecentCache;

struct Key {
  const void* ptr;
  long dims[2];
};
Key key(const void* ptr, long d0, long d1) {
  Key k;
  std::memset(&k, 0, sizeof k);
  k.ptr = ptr;
  k.dims[0] = d0;
  k.dims[1] = d1;
  return k;
}
struct Value {
  int payload[32];
};

TEST(RecentCache, RepeatedArgumentsAreServedWithoutEncodingAgain) {
  RecentCache<Key, Value> cache;
  int made = 0;
  auto make = [&](int tag) {
    return [&made, tag](Value* v) {
      ++made;
      for (int& x : v->payload) x = tag;
      return true;
    };
  };
  int a = 0, b = 0;
  Value v{};
  ASSERT_TRUE(cache.get(key(&a, 64, 128), &v, make(1)));
  EXPECT_EQ(made, 1);
  Value again{};
  ASSERT_TRUE(cache.get(key(&a, 64, 128), &again, make(99)));
  EXPECT_EQ(made, 1) << "a repeated key must not encode again";
  EXPECT_EQ(again.payload[31], 1) << "the stored value, not make's";
  EXPECT_EQ(cache.hits(), 1);
  // Any byte of the key differing is another map.
  ASSERT_TRUE(cache.get(key(&a, 64, 129), &v, make(2)));
  ASSERT_TRUE(cache.get(key(&b, 64, 128), &v, make(3)));
  EXPECT_EQ(made, 3);
  EXPECT_EQ(v.payload[0], 3);
}

TEST(RecentCache, AFailedEncodeStoresNothing) {
  RecentCache<Key, Value> cache;
  int x = 0, calls = 0;
  Value v{};
  EXPECT_FALSE(cache.get(key(&x, 1, 1), &v, [&](Value*) { return ++calls, false; }));
  EXPECT_TRUE(cache.get(key(&x, 1, 1), &v, [&](Value*) { return ++calls, true; }));
  EXPECT_EQ(calls, 2) << "the failure was not cached";
}

TEST(RecentCache, AnEvictedKeyIsEncodedAgain) {
  RecentCache<Key, Value, 1> one_slot;  // every key shares the slot
  int x = 0, made = 0;
  Value v{};
  auto make = [&](Value*) { return ++made, true; };
  one_slot.get(key(&x, 1, 1), &v, make);
  one_slot.get(key(&x, 2, 2), &v, make);  // evicts the first
  one_slot.get(key(&x, 1, 1), &v, make);
  EXPECT_EQ(made, 3);
  one_slot.get(key(&x, 1, 1), &v, make);
  EXPECT_EQ(made, 3);
}

}  // namespace
}  // namespace lmscale
