// Named ranges around phases (forward, backward, optimizer, attention sub-parts). Each range is both
// an NVTX range (for users who run nsys) and a libtorch RecordFunction scope (so lmscale's own
// Kineto-based profiler can attribute kernels to phases without nsys).
#pragma once
#include <ATen/record_function.h>

#include <optional>
#include <string>

#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define LMSCALE_HAVE_NVTX 1
#endif

namespace lmscale {

class ScopedRange {
 public:
  explicit ScopedRange(const char* name) {
#ifdef LMSCALE_HAVE_NVTX
    nvtxRangePushA(name);
#endif
    if (at::hasCallbacks()) {
      guard_.emplace(at::RecordScope::USER_SCOPE);
      if (guard_->isActive()) guard_->before(name);
    }
  }
  ~ScopedRange() {
    guard_.reset();
#ifdef LMSCALE_HAVE_NVTX
    nvtxRangePop();
#endif
  }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

 private:
  std::optional<at::RecordFunction> guard_;
};

}  // namespace lmscale
