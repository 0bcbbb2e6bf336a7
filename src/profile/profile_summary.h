// Turns a flat list of profiler events of one phase (forward, backward or optimizer) into the
// kernel table of `lmscale profile`: time per op name, calls per step, share of the phase, and the
// attention sub-parts. Pure functions on plain structs, so they are tested without a profiler;
// bench/profile_run reads the events out of libtorch's Kineto profiler.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lmscale {

// One profiler event, flattened out of torch's KinetoEvent.
struct TraceOp {
  std::string name;
  bool on_device = false;   // GPU activity (kernel, memcpy, memset); false for CPU ops
  bool user_scope = false;  // a ScopedRange / RECORD_USER_SCOPE range, not an op
  uint64_t start_ns = 0, end_ns = 0;
  uint64_t thread = 0;               // CPU thread that ran it (CPU events only)
  uint64_t correlation = 0;          // CPU events: their own id; device events: CUPTI's id
  uint64_t linked_correlation = 0;   // device events: id of the CPU op that launched them
};

struct OpStat {
  std::string name;
  double calls_per_step = 0;
  double ms_per_step = 0;
  double share = 0;  // of the phase's total, in [0, 1]
};

struct PhaseProfile {
  std::string phase;         // forward | backward | optimizer
  bool device_time = false;  // true: GPU kernel time; false: CPU self time of ops (CPU runs)
  int steps = 0;
  double total_ms_per_step = 0;   // sum over every op/kernel of the phase (the share denominator)
  std::vector<OpStat> ops;        // every op name, most time first
  // Time of the ops run inside each "attention/<part>" range (part = scores, softmax, value), in
  // the order the parts first appear; empty when the phase has no such ranges (e.g. backward,
  // whose ops run outside the forward's ranges).
  std::vector<OpStat> attention;
};

// Summarizes the events of `steps` repetitions of one phase.
// device_time = true counts device events only (each kernel's own duration; kernels do not nest).
// device_time = false counts CPU ops by self time (duration minus that of the events nested
// directly inside it on the same thread), so nested ops (aten::matmul → aten::mm) are not
// counted twice and shares sum to at most 100%. User-scope ranges are never listed as ops.
PhaseProfile summarize_phase(const std::string& phase, const std::vector<TraceOp>& events, int steps,
                             bool device_time);

// "aten::mm" style names stay; GPU kernel names (long C++ templates) are cut to `max_chars` with
// "…" so a table stays readable. The JSON keeps full names.
std::string short_kernel_name(const std::string& name, size_t max_chars = 90);

}  // namespace lmscale
