// Faults injected on purpose, for tests of the paths that record a failed cell (issue 21): the one
// reader of LMSCALE_INJECT_FAULT (and of its older shorthand LMSCALE_INJECT_OOM). What each fault
// does is up to the code that asks: the e2e benchmark fails a config the way the real fault would,
// the CUDA-graph step makes its capture fail for real.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lmscale {

enum class InjectedFault {
  oom,           // an allocation far beyond any memory, so the device's own allocator raises its error
  capture,       // a CUDA-graph capture error that reaches the sweep
  error,         // any other failure of the cell (a kernel launch error)
  capture_sync,  // a device synchronize inside the CUDA-graph capture: a real capture failure on a GPU
};

// The word LMSCALE_INJECT_FAULT spells a fault with ("oom", "capture", "error", "capture-sync").
std::string to_string(InjectedFault f);

// One entry of LMSCALE_INJECT_FAULT: <fault>@<size>[:<context>], context -1 = every context.
struct FaultSpec {
  InjectedFault fault;
  std::string size;
  int64_t context = -1;
};

// Parses `<fault>@<size>[:<context>][,...]`; throws naming the bad entry and the allowed faults.
std::vector<FaultSpec> parse_fault_specs(const std::string& text);

// Every fault the environment asks for a config of this size and context, in the order given:
// LMSCALE_INJECT_OOM=<size>[:<context>] (the same as oom@<size>[:<context>]) first, then
// LMSCALE_INJECT_FAULT=<fault>@<size>[:<context>][,...]. Empty when neither is set.
std::vector<InjectedFault> injected_faults(const std::string& size, int64_t context);

// Whether the environment asks for `fault` in a config of this size and context.
bool fault_injected(InjectedFault fault, const std::string& size, int64_t context);

}  // namespace lmscale
