// Aggregation of profiler events into per-phase kernel tables; see profile_summary.h.
#include "profile/profile_summary.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <map>
#include <unordered_map>

namespace lmscale {
namespace {

constexpr const char* kAttentionPrefix = "attention/";

// Self time of every CPU event: per thread, events sorted by start (longest first on ties) form a
// forest by interval nesting; an event's self time is its duration minus its direct children's.
std::vector<double> cpu_self_ns(const std::vector<TraceOp>& ev) {
  std::vector<double> self(ev.size(), 0.0);
  std::map<uint64_t, std::vector<size_t>> by_thread;
  for (size_t i = 0; i < ev.size(); ++i)
    if (!ev[i].on_device) by_thread[ev[i].thread].push_back(i);
  for (auto& [tid, idx] : by_thread) {
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
      if (ev[a].start_ns != ev[b].start_ns) return ev[a].start_ns < ev[b].start_ns;
      return ev[a].end_ns > ev[b].end_ns;
    });
    std::vector<size_t> open;  // ancestors of the current event, innermost last
    for (size_t i : idx) {
      while (!open.empty() && ev[open.back()].end_ns <= ev[i].start_ns) open.pop_back();
      const double dur = static_cast<double>(ev[i].end_ns - ev[i].start_ns);
      self[i] += dur;
      if (!open.empty()) self[open.back()] -= dur;
      open.push_back(i);
    }
  }
  // Clock granularity can make children sum past their parent by a few ns: never negative.
  for (double& s : self) s = std::max(0.0, s);
  return self;
}

// For each event, the attention part ("scores", ...) whose range contains it, or "".
// CPU events: containment in a user-scope range on the same thread. Device events: the part of
// the CPU op that launched them (linked correlation id, falling back to their own id).
std::vector<std::string> attention_parts(const std::vector<TraceOp>& ev, std::vector<std::string>* order) {
  struct Range {
    uint64_t thread, start, end;
    std::string part;
  };
  std::vector<Range> ranges;
  for (const auto& e : ev) {
    if (!e.user_scope || e.on_device || e.name.rfind(kAttentionPrefix, 0) != 0) continue;
    std::string part = e.name.substr(std::char_traits<char>::length(kAttentionPrefix));
    ranges.push_back({e.thread, e.start_ns, e.end_ns, part});
    if (std::find(order->begin(), order->end(), part) == order->end()) order->push_back(part);
  }
  std::vector<std::string> part(ev.size());
  if (ranges.empty()) return part;
  std::unordered_map<uint64_t, std::string> by_corr;
  for (size_t i = 0; i < ev.size(); ++i) {
    const auto& e = ev[i];
    if (e.on_device || e.user_scope) continue;
    for (const auto& r : ranges) {
      if (r.thread == e.thread && r.start <= e.start_ns && e.end_ns <= r.end) {
        part[i] = r.part;
        if (e.correlation) by_corr.emplace(e.correlation, r.part);
        break;
      }
    }
  }
  for (size_t i = 0; i < ev.size(); ++i) {
    const auto& e = ev[i];
    if (!e.on_device) continue;
    auto it = by_corr.find(e.linked_correlation);
    if (it == by_corr.end() || !e.linked_correlation) it = by_corr.find(e.correlation);
    if (it != by_corr.end()) part[i] = it->second;
  }
  return part;
}

}  // namespace

PhaseProfile summarize_phase(const std::string& phase, const std::vector<TraceOp>& events, int steps,
                             bool device_time) {
  TORCH_CHECK(steps > 0, "profile: --steps must be at least 1, got ", steps);
  PhaseProfile p;
  p.phase = phase;
  p.device_time = device_time;
  p.steps = steps;
  const std::vector<double> self = device_time ? std::vector<double>() : cpu_self_ns(events);
  std::vector<std::string> part_order;
  const std::vector<std::string> part = attention_parts(events, &part_order);

  std::map<std::string, OpStat> by_name;
  std::map<std::string, OpStat> by_part;
  double total_ns = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    if (e.user_scope || e.on_device != device_time) continue;
    const double ns = device_time ? static_cast<double>(e.end_ns - e.start_ns) : self[i];
    auto& s = by_name[e.name];
    s.name = e.name;
    s.calls_per_step += 1;
    s.ms_per_step += ns;
    total_ns += ns;
    if (!part[i].empty()) {
      auto& a = by_part[part[i]];
      a.name = part[i];
      a.calls_per_step += 1;
      a.ms_per_step += ns;
    }
  }
  p.total_ms_per_step = total_ns / 1e6 / steps;
  // Sums were in ns over all steps; per step in ms, share of the phase total.
  auto finish = [&](OpStat s) {
    s.share = total_ns > 0 ? s.ms_per_step / total_ns : 0.0;
    s.ms_per_step /= 1e6 * steps;
    s.calls_per_step /= steps;
    return s;
  };
  for (auto& [name, s] : by_name) p.ops.push_back(finish(s));
  std::sort(p.ops.begin(), p.ops.end(), [](const OpStat& a, const OpStat& b) {
    return a.ms_per_step != b.ms_per_step ? a.ms_per_step > b.ms_per_step : a.name < b.name;
  });
  for (const auto& name : part_order) {
    auto it = by_part.find(name);
    p.attention.push_back(it != by_part.end() ? finish(it->second) : OpStat{name, 0, 0, 0});
  }
  return p;
}

std::string short_kernel_name(const std::string& name, size_t max_chars) {
  if (name.size() <= max_chars) return name;
  // Cut on a character boundary of UTF-8 (names are ASCII in practice, but stay safe).
  size_t cut = max_chars;
  while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;
  return name.substr(0, cut) + "…";
}

}  // namespace lmscale
