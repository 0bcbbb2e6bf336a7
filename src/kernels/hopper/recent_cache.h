// Note [tensor map cache]. Every Hopper attention call describes q, k, v (and dout, dq_accum) to TMA
// with cuTensorMapEncodeTiled: 3 maps per forward, 5 per backward. A map is a pure function of the
// call's arguments (address, sizes, strides, box, swizzle), and a training loop hands the same
// addresses step after step (PyTorch's caching allocator repeats its pattern; an xl step has 48 layers,
// ~400 maps), so maps are kept per thread in a direct-mapped table and a call with the same arguments
// copies the stored map instead of encoding it again. Reusing a map whose address was freed and handed
// out again is still right: the map names the address and the shape, never the data. Plain C++ (no
// CUDA headers): RecentCache is tested on the CPU with any value type.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

namespace lmscale::kernels::hopper {

// kSlots (key, value) pairs, one slot per key hash; a new key evicts the slot's old one. Key: a
// trivially copyable struct compared byte by byte, so the caller zero-fills it (padding included)
// before setting its fields.
template <typename Key, typename Value, int kSlots = 1024>
class RecentCache {
  static_assert(std::is_trivially_copyable_v<Key> && std::is_trivially_copyable_v<Value>, "compared and copied as bytes");

 public:
  // The value stored for `key`, else make(&value), stored when it returns true (a failed make stores
  // nothing). Returns true on a hit, else what make returned.
  template <typename Make>
  bool get(const Key& key, Value* out, Make&& make) {
    if (!slots_) slots_.reset(new Slot[kSlots]());
    Slot& s = slots_[hash(key) % kSlots];
    if (s.full && std::memcmp(&s.key, &key, sizeof(Key)) == 0) {
      std::memcpy(out, &s.value, sizeof(Value));
      ++hits_;
      return true;
    }
    if (!make(out)) return false;
    std::memcpy(&s.key, &key, sizeof(Key));
    std::memcpy(&s.value, out, sizeof(Value));
    s.full = true;
    return true;
  }
  long hits() const { return hits_; }

 private:
  struct Slot {
    Key key;
    Value value;
    bool full;
  };
  static uint64_t hash(const Key& key) {  // FNV-1a over the key's bytes
    const auto* b = reinterpret_cast<const unsigned char*>(&key);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof(Key); ++i) h = (h ^ b[i]) * 1099511628211ull;
    return h;
  }
  std::unique_ptr<Slot[]> slots_;
  long hits_ = 0;
};

}  // namespace lmscale::kernels::hopper
