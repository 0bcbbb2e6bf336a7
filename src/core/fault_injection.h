// Faults injected on purpose, for tests of the paths that record a failed cell (real ones are rare): the
// one reader of LMSCALE_INJECT_FAULT (and of its older shorthand LMSCALE_INJECT_OOM). The settings are
// checked once at start (check_fault_injection: an unknown fault or size is a usage error), and an
// injected failure carries its kind (InjectedFaultError), so a cell's status comes from the cause,
// never from words in a message. What each fault does is up to the code that asks: the e2e benchmark
// fails a config the way the real fault would, the CUDA-graph step makes its capture fail for real,
// bench ddp/zero make one rank's parameters diverge.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace lmscale {

enum class InjectedFault {
  oom,           // an allocation far beyond any memory, so the device's own allocator raises its error
  capture,       // a CUDA-graph capture error that reaches the sweep
  error,         // any other failure of the cell (a kernel launch error)
  capture_sync,  // a device synchronize inside the CUDA-graph capture: a real capture failure on a GPU
  diverge,       // bench ddp/zero: rank 1 nudges one parameter after its first step, so the ranks diverge
};

// The word LMSCALE_INJECT_FAULT spells a fault with ("oom", "capture", "error", "capture-sync", "diverge").
std::string to_string(InjectedFault f);

// One entry of LMSCALE_INJECT_FAULT: <fault>@<size>[:<context>], context -1 = every context.
struct FaultSpec {
  InjectedFault fault;
  std::string size;
  int64_t context = -1;
};

// Parses `<fault>@<size>[:<context>][,...]`; throws UsageError naming the bad entry and the allowed form.
std::vector<FaultSpec> parse_fault_specs(const std::string& text);

// Checks LMSCALE_INJECT_FAULT and LMSCALE_INJECT_OOM before anything runs: each entry parses and names
// one of `sizes` (the model sizes this binary knows). Throws UsageError naming the variable, the entry,
// the allowed faults or sizes; does nothing when neither is set.
void check_fault_injection(const std::vector<std::string>& sizes);

// The injection settings of this process as they would be typed before a command
// ("LMSCALE_INJECT_FAULT=oom@tiny "), "" when none is set: the records' `command` carries them, so a
// run that injected faults can never be mistaken for (or re-run as) one that did not.
std::string fault_injection_prefix();

// Every fault the environment asks for a config of this size and context, in the order given:
// LMSCALE_INJECT_OOM=<size>[:<context>] (the same as oom@<size>[:<context>]) first, then
// LMSCALE_INJECT_FAULT=<fault>@<size>[:<context>][,...]. Empty when neither is set.
std::vector<InjectedFault> injected_faults(const std::string& size, int64_t context);

// Whether the environment asks for `fault` in a config of this size and context.
bool fault_injected(InjectedFault fault, const std::string& size, int64_t context);

// A failure raised on purpose (capture, error): what() reads like the real fault, fault() says which
// one it stands for, so the cell's status is taken from it.
class InjectedFaultError : public std::runtime_error {
 public:
  InjectedFaultError(InjectedFault fault, const std::string& what) : std::runtime_error(what), fault_(fault) {}
  InjectedFault fault() const { return fault_; }

 private:
  InjectedFault fault_;
};

}  // namespace lmscale
