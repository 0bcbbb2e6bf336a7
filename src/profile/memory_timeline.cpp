// Allocator event replay: timeline, peak, live blocks at the peak; see memory_timeline.h.
#include "profile/memory_timeline.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <map>
#include <unordered_map>

namespace lmscale {

MemoryTimeline replay(const std::vector<AllocEvent>& events, int64_t baseline) {
  MemoryTimeline t;
  t.baseline = baseline;
  t.peak_bytes = baseline;
  t.active.reserve(events.size());
  int64_t now = baseline;
  bool have_peak = false;
  for (size_t i = 0; i < events.size(); ++i) {
    now += events[i].alloc ? events[i].size : -events[i].size;
    t.active.push_back(now);
    if (!have_peak || now > t.peak_bytes) {
      t.peak_bytes = now;
      t.peak_event = i;
      have_peak = true;
    }
  }
  if (events.empty()) return t;
  // Second pass up to the peak: which blocks are live there. Addresses are reused after a free,
  // so the map always holds the latest allocation at an address.
  std::unordered_map<uint64_t, size_t> live;
  for (size_t i = 0; i <= t.peak_event; ++i) {
    if (events[i].alloc)
      live[events[i].addr] = i;
    else
      live.erase(events[i].addr);
  }
  std::map<std::pair<std::string, std::string>, Origin> origins;
  for (const auto& [addr, i] : live) {
    const auto& e = events[i];
    t.live_at_peak.push_back({addr, e.size, e.phase, e.where, i});
    auto& o = origins[{e.phase, e.where}];
    o.phase = e.phase;
    o.where = e.where;
    o.bytes += e.size;
    o.blocks += 1;
  }
  std::sort(t.live_at_peak.begin(), t.live_at_peak.end(), [](const LiveBlock& a, const LiveBlock& b) {
    return a.size != b.size ? a.size > b.size : a.event < b.event;
  });
  for (auto& [key, o] : origins) t.origins_at_peak.push_back(o);
  std::sort(t.origins_at_peak.begin(), t.origins_at_peak.end(), [](const Origin& a, const Origin& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.where < b.where;
  });
  return t;
}

int64_t residual_activation_bytes(int64_t batch, int64_t context, int64_t d_model) {
  TORCH_CHECK(batch > 0 && context > 0 && d_model > 0, "residual activation size needs positive B, T, d; got B=",
              batch, " T=", context, " d=", d_model);
  return batch * context * d_model * static_cast<int64_t>(sizeof(float));
}

nlohmann::json timeline_json(const MemoryTimeline& t, const std::vector<AllocEvent>& events, size_t top,
                             size_t max_points) {
  TORCH_INTERNAL_ASSERT(t.active.size() == events.size(), "timeline and events differ in length");
  TORCH_CHECK(max_points >= 2, "timeline needs at least 2 points, got max_points=", max_points);
  nlohmann::json j;
  j["baseline_bytes"] = t.baseline;
  j["events"] = events.size();
  j["peak"] = {{"event", t.peak_event}, {"bytes", t.peak_bytes}};
  // Buckets of consecutive events; each bucket is drawn at its last index with its maximum.
  std::vector<int64_t> index, bytes;
  const size_t n = t.active.size();
  const size_t per = std::max<size_t>(1, (n + max_points - 1) / max_points);
  for (size_t b = 0; b < n; b += per) {
    const size_t e = std::min(n, b + per);
    index.push_back(static_cast<int64_t>(e - 1));
    bytes.push_back(*std::max_element(t.active.begin() + b, t.active.begin() + e));
  }
  j["event_index"] = index;
  j["active_bytes"] = bytes;
  // Phase spans: maximal runs of events with the same phase label.
  nlohmann::json spans = nlohmann::json::array();
  for (size_t i = 0; i < n;) {
    size_t k = i;
    while (k + 1 < n && events[k + 1].phase == events[i].phase) ++k;
    if (!events[i].phase.empty()) spans.push_back({{"phase", events[i].phase}, {"first", i}, {"last", k}});
    i = k + 1;
  }
  j["phases"] = spans;
  nlohmann::json blocks = nlohmann::json::array();
  for (size_t i = 0; i < t.live_at_peak.size() && i < top; ++i) {
    const auto& b = t.live_at_peak[i];
    blocks.push_back({{"bytes", b.size}, {"phase", b.phase}, {"where", b.where}, {"event", b.event}});
  }
  j["largest_live_at_peak"] = blocks;
  nlohmann::json origins = nlohmann::json::array();
  for (size_t i = 0; i < t.origins_at_peak.size() && i < top; ++i) {
    const auto& o = t.origins_at_peak[i];
    origins.push_back({{"bytes", o.bytes}, {"blocks", o.blocks}, {"phase", o.phase}, {"where", o.where}});
  }
  j["origins_at_peak"] = origins;
  return j;
}

}  // namespace lmscale
