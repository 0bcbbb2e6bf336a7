// Bucket assignment by size (pure function; tested in tests/cpp/distributed/bucketing_test.cpp).
#include "distributed/bucketing.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <map>
#include <string>

namespace lmscale::distributed {

int64_t bucket_cap_bytes(double bucket_mb) {
  TORCH_CHECK(bucket_mb >= 0, "bucket size ", bucket_mb, " MB is negative; pass 0 (one tensor per bucket) or more.");
  double bytes = bucket_mb * double(1 << 20);
  if (!std::isfinite(bytes) || bytes >= 9.0e18) return kUnlimitedBucketBytes;
  return static_cast<int64_t>(bytes);
}

std::vector<std::vector<size_t>> assign_buckets(const std::vector<TensorInfo>& tensors, int64_t cap_bytes,
                                                bool reverse_order) {
  TORCH_CHECK(cap_bytes >= 0, "bucket cap ", cap_bytes, " bytes is negative; pass 0 or more.");
  struct Open {
    size_t bucket;  // index into `buckets`
    int64_t bytes;
  };
  std::vector<std::vector<size_t>> buckets;
  // One open bucket per (dtype, device): a flat buffer can hold only one dtype on one device.
  std::map<std::string, Open> open;
  const size_t n = tensors.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t i = reverse_order ? n - 1 - k : k;
    const TensorInfo& t = tensors[i];
    if (!t.included) continue;
    TORCH_CHECK(t.numel >= 0, "tensor ", i, " has numel ", t.numel, "; sizes must be non-negative.");
    const int64_t bytes = t.numel * static_cast<int64_t>(c10::elementSize(t.dtype));
    const std::string key = std::string(c10::toString(t.dtype)) + "@" + t.device.str();
    auto it = open.find(key);
    // Overflow-safe "would exceed": bytes > cap - current.
    if (it != open.end() && bytes > cap_bytes - it->second.bytes) {
      open.erase(it);
      it = open.end();
    }
    if (it == open.end()) {
      buckets.emplace_back();
      it = open.emplace(key, Open{buckets.size() - 1, 0}).first;
    }
    buckets[it->second.bucket].push_back(i);
    it->second.bytes += bytes;
  }
  return buckets;
}

}  // namespace lmscale::distributed
