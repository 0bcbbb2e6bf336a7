// Error vocabulary of lmscale. User mistakes raise c10::Error through TORCH_CHECK (message names
// the argument, the value, what is allowed and the fix); broken invariants use TORCH_INTERNAL_ASSERT.
// The CLI prints what_without_backtrace() and exits non-zero; the library never calls exit().
#pragma once
#include <c10/util/Exception.h>

#include <exception>
#include <new>
#include <string>

namespace lmscale {

// Message of any exception without libtorch's C++ backtrace (users want the diagnosis, not frames).
inline std::string error_message(const std::exception& e) {
  if (auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}

// True for running out of memory on either side: the CUDA caching allocator's c10::OutOfMemoryError
// (and its message on older paths), the CPU allocator's c10::Error "can't allocate memory", and
// std::bad_alloc.
inline bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) || dynamic_cast<const std::bad_alloc*>(&e)) return true;
  std::string m = e.what();
  return m.find("out of memory") != std::string::npos || m.find("can't allocate memory") != std::string::npos;
}

}  // namespace lmscale
