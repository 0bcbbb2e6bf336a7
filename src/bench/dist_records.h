// One JSON Lines record per measured metric, shared by the distributed benchmarks (comm, ddp, zero)
// and `lmscale account`: provenance from make_record, the config fields, then metric/value/unit.
#pragma once
#include <string>

#include "core/results.h"

namespace lmscale {

inline Json metric_record(const std::string& bench, const std::string& impl, const Json& config,
                          const std::string& metric, double value, const std::string& unit) {
  Json r = make_record(bench, impl);
  for (auto it = config.begin(); it != config.end(); ++it) r[it.key()] = it.value();
  r["metric"] = metric;
  r["value"] = value;
  r["unit"] = unit;
  return r;
}

}  // namespace lmscale
