// Error vocabulary of lmscale. User mistakes raise c10::Error through TORCH_CHECK (message names
// the argument, the value, what is allowed and the fix); broken invariants use TORCH_INTERNAL_ASSERT.
// The CLI prints what_without_backtrace() and exits non-zero; the library never calls exit().
// A mistake in what the user asked for that the library finds (a flag's value, a setting, a folder)
// is a UsageError: the CLI exits 2 for it, as for a flag it cannot parse.
#pragma once
#include <c10/util/Exception.h>

#include <exception>
#include <new>
#include <stdexcept>
#include <string>

namespace lmscale {

// A usage error found by the library. The message names the flag or setting, the value, the allowed
// form and the fix; `lmscale` prints it on one line and exits 2 (docs/design.md §5.3).
class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Runs `check`, a validate() that raises c10::Error for what the user asked for, and turns that error into
// a UsageError: for the CLI's checks of every configuration before the first measurement (exit 2).
template <typename Check>
void check_as_usage(Check&& check) {
  try {
    check();
  } catch (const c10::Error& e) {
    throw UsageError(e.what_without_backtrace());
  }
}

// Message of any exception without libtorch's C++ backtrace (users want the diagnosis, not frames).
inline std::string error_message(const std::exception& e) {
  if (auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}

// True for running out of memory on either side, by the error's type: the CUDA caching allocator's
// c10::OutOfMemoryError, std::bad_alloc, and the CPU allocator's error. That last one is a plain
// c10::Error (libtorch gives it no type of its own), so it is known by its origin, which c10 puts at
// the head of the message ("[enforce fail at alloc_cpu.cpp:127] ..."), never by a word anywhere in
// a message (an error that merely mentions memory is not an oom).
inline bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) || dynamic_cast<const std::bad_alloc*>(&e)) return true;
  const auto* ce = dynamic_cast<const c10::Error*>(&e);
  if (!ce) return false;
  const std::string& m = ce->msg();
  return m.rfind("[enforce fail at alloc_cpu.cpp:", 0) == 0 || m.rfind("DefaultCPUAllocator:", 0) == 0;
}

}  // namespace lmscale
