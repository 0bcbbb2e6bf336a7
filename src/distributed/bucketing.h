// Bucket assignment for DDP (the "assignment" piece of docs/spec.md §6.2): a pure function from
// tensor sizes, dtypes, devices and order to lists of tensor indices. No process group, no
// autograd: marking and communication live in ddp.cpp.
#pragma once
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <vector>

namespace lmscale::distributed {

// PyTorch DDP's default cap: large enough to amortise the per-call cost, small enough that the
// first bucket launches early in backward. See docs/distributed.md for the overhead model.
constexpr int64_t kDefaultBucketBytesCap = 25LL << 20;
// Caps at or above this mean "no cap" (one bucket per dtype and device).
constexpr int64_t kUnlimitedBucketBytes = INT64_MAX;

struct TensorInfo {
  int64_t numel = 0;
  c10::ScalarType dtype = c10::kFloat;
  c10::Device device = c10::Device("cpu");
  bool included = true;  // false: never bucketed (e.g. a parameter with requires_grad=false)
};

// Groups the included tensors into buckets of at most cap_bytes each. Tensors are visited in
// reverse index order when reverse_order is true (the order backward produces gradients: last
// layer first), else in index order. A tensor joins the open bucket of its dtype and device unless
// that would push the bucket past cap_bytes, in which case the open bucket is closed first; a
// tensor larger than the cap gets a bucket of its own (so cap_bytes = 0 gives one tensor per
// bucket). Buckets are returned in the order they were opened, which is the order they become
// ready in backward; indices inside a bucket are in visiting order. Throws on a negative cap.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<TensorInfo>& tensors, int64_t cap_bytes,
                                                bool reverse_order);

// MB (2^20 bytes, as PyTorch's bucket_cap_mb) to a byte cap; infinity or huge values give
// kUnlimitedBucketBytes.
int64_t bucket_cap_bytes(double bucket_mb);

}  // namespace lmscale::distributed
