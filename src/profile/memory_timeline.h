// Replays a recorded stream of allocator events (alloc / free, with the op and phase that made
// them) into an active-memory timeline, finds the peak and the blocks live at it, and groups them
// by origin. Pure functions on plain structs (tested on CPU); the recording itself is CUDA-only
// and lives in bench/memory_run.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace lmscale {

struct AllocEvent {
  bool alloc = true;    // false: the block at `addr` was freed
  uint64_t addr = 0;
  int64_t size = 0;     // bytes (the allocator's rounded block size)
  std::string phase;    // init | forward | backward | optimizer | "" (between phases)
  std::string where;    // innermost user range and op stack, e.g. "attention/softmax: aten::softmax"
};

struct LiveBlock {
  uint64_t addr = 0;
  int64_t size = 0;
  std::string phase, where;
  size_t event = 0;  // index of its alloc event
};

struct Origin {
  std::string phase, where;
  int64_t bytes = 0;
  int64_t blocks = 0;
};

struct MemoryTimeline {
  int64_t baseline = 0;               // bytes live before the first event (not in the stream)
  std::vector<int64_t> active;        // bytes live after each event: baseline + allocs - frees
  size_t peak_event = 0;              // first event at which `active` is highest
  int64_t peak_bytes = 0;             // = baseline when there are no events
  std::vector<LiveBlock> live_at_peak;  // blocks allocated in the stream and live at the peak, largest first
  std::vector<Origin> origins_at_peak;  // live_at_peak grouped by (phase, where), most bytes first
};

// Frees of blocks allocated before the stream began still lower `active` (they were part of the
// baseline) but cannot be attributed.
MemoryTimeline replay(const std::vector<AllocEvent>& events, int64_t baseline);

// Bytes of one fp32 residual-stream activation, B·T·d·4 (docs/spec.md §2.4).
int64_t residual_activation_bytes(int64_t batch, int64_t context, int64_t d_model);

// The timeline as the small JSON that `python -m lmscale.plots memory` reads: at most `max_points` points
// (each kept point is the maximum of the events it stands for, so the peak survives), phase spans
// over event indices, the peak, and the `top` largest live blocks and origins at the peak.
nlohmann::json timeline_json(const MemoryTimeline& t, const std::vector<AllocEvent>& events, size_t top,
                             size_t max_points = 4000);

}  // namespace lmscale
