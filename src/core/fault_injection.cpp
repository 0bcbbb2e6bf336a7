// LMSCALE_INJECT_FAULT / LMSCALE_INJECT_OOM, read in one place; see fault_injection.h.
#include "core/fault_injection.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"

namespace lmscale {
namespace {

constexpr const char* kFaultWords = "oom, capture, error, capture-sync or diverge";
constexpr const char* kForm = "<fault>@<size>[:<context>][,...], e.g. LMSCALE_INJECT_FAULT=oom@tiny:128,error@small";

[[noreturn]] void refuse(const std::string& what) { throw UsageError("LMSCALE_INJECT_FAULT: " + what); }

InjectedFault fault_from_string(const std::string& word, const std::string& entry) {
  if (word == "oom") return InjectedFault::oom;
  if (word == "capture") return InjectedFault::capture;
  if (word == "error") return InjectedFault::error;
  if (word == "capture-sync") return InjectedFault::capture_sync;
  if (word == "diverge") return InjectedFault::diverge;
  refuse("unknown fault '" + word + "' in entry '" + entry + "': use " + kFaultWords + " (form " + kForm + ")");
}

// "<size>[:<context>]" into spec.size and spec.context.
void parse_target(const std::string& target, const std::string& entry, FaultSpec& spec) {
  const size_t colon = target.find(':');
  spec.size = target.substr(0, colon);
  if (spec.size.empty()) refuse("entry '" + entry + "' names no size after '@' (form " + kForm + ")");
  if (colon == std::string::npos) return;
  const std::string context = target.substr(colon + 1);
  char* end = nullptr;
  const long long value = std::strtoll(context.c_str(), &end, 10);
  if (context.empty() || !end || *end != '\0' || value <= 0)
    refuse("entry '" + entry + "': the context after ':' must be a positive whole number, not '" + context + "'");
  spec.context = value;
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Both variables as one list of specs (LMSCALE_INJECT_OOM=<size>[:<context>] is oom@<size>[:<context>]).
std::vector<FaultSpec> specs_from_env() {
  std::vector<FaultSpec> specs;
  if (const std::string oom = env_or_empty("LMSCALE_INJECT_OOM"); !oom.empty()) {
    try {
      specs = parse_fault_specs("oom@" + oom);
    } catch (const UsageError& e) {
      throw UsageError("LMSCALE_INJECT_OOM=" + oom + " is not <size>[:<context>] (" + e.what() + ")");
    }
  }
  for (auto& spec : parse_fault_specs(env_or_empty("LMSCALE_INJECT_FAULT"))) specs.push_back(std::move(spec));
  return specs;
}

}  // namespace

std::string to_string(InjectedFault f) {
  switch (f) {
    case InjectedFault::oom: return "oom";
    case InjectedFault::capture: return "capture";
    case InjectedFault::error: return "error";
    case InjectedFault::capture_sync: return "capture-sync";
    case InjectedFault::diverge: return "diverge";
  }
  return "?";
}

std::vector<FaultSpec> parse_fault_specs(const std::string& text) {
  std::vector<FaultSpec> specs;
  if (text.empty()) return specs;
  for (size_t at = 0; at <= text.size();) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string entry = text.substr(at, comma - at);
    at = comma + 1;
    const size_t a = entry.find('@');
    if (a == std::string::npos)
      refuse("entry '" + entry + "' is not <fault>@<size>[:<context>] (fault: " + kFaultWords + "; form " + kForm + ")");
    FaultSpec spec{fault_from_string(entry.substr(0, a), entry)};
    parse_target(entry.substr(a + 1), entry, spec);
    specs.push_back(std::move(spec));
  }
  return specs;
}

void check_fault_injection(const std::vector<std::string>& sizes) {
  for (const auto& spec : specs_from_env()) {
    if (std::find(sizes.begin(), sizes.end(), spec.size) != sizes.end()) continue;
    std::string known;
    for (const auto& s : sizes) known += (known.empty() ? "" : ", ") + s;
    throw UsageError("LMSCALE_INJECT_FAULT/LMSCALE_INJECT_OOM: '" + spec.size +
                     "' is not a model size, so the fault would never fire: use one of " + known);
  }
}

std::string fault_injection_prefix() {
  std::string prefix;
  for (const char* name : {"LMSCALE_INJECT_OOM", "LMSCALE_INJECT_FAULT"})
    if (const std::string v = env_or_empty(name); !v.empty()) prefix += std::string(name) + "=" + v + " ";
  return prefix;
}

std::vector<InjectedFault> injected_faults(const std::string& size, int64_t context) {
  std::vector<InjectedFault> faults;
  for (const auto& spec : specs_from_env())
    if (spec.size == size && (spec.context < 0 || spec.context == context)) faults.push_back(spec.fault);
  return faults;
}

bool fault_injected(InjectedFault fault, const std::string& size, int64_t context) {
  const auto faults = injected_faults(size, context);
  return std::find(faults.begin(), faults.end(), fault) != faults.end();
}

}  // namespace lmscale
