// LMSCALE_INJECT_FAULT / LMSCALE_INJECT_OOM, read in one place; see fault_injection.h.
#include "core/fault_injection.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>

namespace lmscale {
namespace {

constexpr const char* kFaultWords = "oom, capture, error or capture-sync";

InjectedFault fault_from_string(const std::string& word, const std::string& entry) {
  if (word == "oom") return InjectedFault::oom;
  if (word == "capture") return InjectedFault::capture;
  if (word == "error") return InjectedFault::error;
  if (word == "capture-sync") return InjectedFault::capture_sync;
  TORCH_CHECK(false, "LMSCALE_INJECT_FAULT: unknown fault '", word, "' in entry '", entry, "': use ", kFaultWords);
  return InjectedFault::error;
}

// "<size>[:<context>]" into spec.size and spec.context.
void parse_target(const std::string& target, const std::string& entry, FaultSpec& spec) {
  const size_t colon = target.find(':');
  spec.size = target.substr(0, colon);
  if (colon == std::string::npos) return;
  const std::string context = target.substr(colon + 1);
  char* end = nullptr;
  const long long value = std::strtoll(context.c_str(), &end, 10);
  TORCH_CHECK(!context.empty() && end && *end == '\0' && value > 0, "LMSCALE_INJECT_FAULT entry '", entry,
              "': the context after ':' must be a positive whole number, not '", context, "'");
  spec.context = value;
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

std::string to_string(InjectedFault f) {
  switch (f) {
    case InjectedFault::oom: return "oom";
    case InjectedFault::capture: return "capture";
    case InjectedFault::error: return "error";
    case InjectedFault::capture_sync: return "capture-sync";
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
    TORCH_CHECK(a != std::string::npos, "LMSCALE_INJECT_FAULT entry '", entry,
                "' is not <fault>@<size>[:<context>] (fault: ", kFaultWords, ")");
    FaultSpec spec{fault_from_string(entry.substr(0, a), entry)};
    parse_target(entry.substr(a + 1), entry, spec);
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::vector<InjectedFault> injected_faults(const std::string& size, int64_t context) {
  std::vector<FaultSpec> specs;
  if (const std::string oom = env_or_empty("LMSCALE_INJECT_OOM"); !oom.empty())
    specs = parse_fault_specs("oom@" + oom);
  for (auto& spec : parse_fault_specs(env_or_empty("LMSCALE_INJECT_FAULT"))) specs.push_back(std::move(spec));
  std::vector<InjectedFault> faults;
  for (const auto& spec : specs)
    if (spec.size == size && (spec.context < 0 || spec.context == context)) faults.push_back(spec.fault);
  return faults;
}

bool fault_injected(InjectedFault fault, const std::string& size, int64_t context) {
  const auto faults = injected_faults(size, context);
  return std::find(faults.begin(), faults.end(), fault) != faults.end();
}

}  // namespace lmscale
