// The mixed-precision lab's reports (docs/spec.md §2.3): each experiment of lab_precision printed as a
// table and saved as <out>/lab.jsonl (bench "lab") plus one markdown file per experiment.
#pragma once
#include <cstdint>
#include <string>

namespace lmscale {

// Sum of `increment` added `steps` times in four precision setups → lab_accumulation.md.
void run_accumulation_report(int64_t steps, double increment, const std::string& out);
// Dtypes of the toy model's tensors under fp16/bf16 autocast on "all" (cpu + cuda:0 if visible),
// "cpu", "cuda" or "cuda:N" → lab_autocast.md.
void run_autocast_report(const std::string& device_spec, const std::string& out);

}  // namespace lmscale
