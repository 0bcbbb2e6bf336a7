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
                                                bool reverse_order, int64_t first_cap_bytes) {
  std::vector<size_t> order(tensors.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = reverse_order ? order.size() - 1 - k : k;
  return assign_buckets_in_order(tensors, order, cap_bytes, first_cap_bytes);
}

std::vector<std::vector<size_t>> assign_buckets_in_order(const std::vector<TensorInfo>& tensors,
                                                         const std::vector<size_t>& given_order, int64_t cap_bytes,
                                                         int64_t first_cap_bytes) {
  TORCH_CHECK(cap_bytes >= 0, "bucket cap ", cap_bytes, " bytes is negative; pass 0 or more.");
  const size_t n = tensors.size();
  std::vector<bool> listed(n, false);
  std::vector<size_t> order;
  for (size_t i : given_order) {
    TORCH_CHECK(i < n && !listed[i], "bucket order: index ", i, " is out of range or repeated (", n, " tensors).");
    listed[i] = true;
    order.push_back(i);
  }
  for (size_t k = 0; k < n; ++k)
    if (!listed[n - 1 - k]) order.push_back(n - 1 - k);
  struct Open {
    size_t bucket;  // index into `buckets`
    int64_t bytes;
    int64_t cap;
  };
  std::vector<std::vector<size_t>> buckets;
  // One open bucket per (dtype, device): a flat buffer can hold only one dtype on one device.
  std::map<std::string, Open> open;
  std::map<std::string, bool> opened_before;
  for (size_t i : order) {
    const TensorInfo& t = tensors[i];
    if (!t.included) continue;
    TORCH_CHECK(t.numel >= 0, "tensor ", i, " has numel ", t.numel, "; sizes must be non-negative.");
    const int64_t bytes = t.numel * static_cast<int64_t>(c10::elementSize(t.dtype));
    const std::string key = std::string(c10::toString(t.dtype)) + "@" + t.device.str();
    auto it = open.find(key);
    // Overflow-safe "would exceed": bytes > cap - current.
    if (it != open.end() && bytes > it->second.cap - it->second.bytes) {
      open.erase(it);
      it = open.end();
    }
    if (it == open.end()) {
      const bool first = !opened_before[key];
      opened_before[key] = true;
      const int64_t cap = first && first_cap_bytes >= 0 ? first_cap_bytes : cap_bytes;
      buckets.emplace_back();
      it = open.emplace(key, Open{buckets.size() - 1, 0, cap}).first;
    }
    buckets[it->second.bucket].push_back(i);
    it->second.bytes += bytes;
  }
  return buckets;
}

}  // namespace lmscale::distributed
