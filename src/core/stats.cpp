// Summary statistics of repeated timings; see stats.h.
#include "core/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace lmscale {

Summary summarize(std::vector<double> v) {
  Summary s;
  s.n = static_cast<int>(v.size());
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.std = std::sqrt(ss / (v.size() - 1));
  }
  return s;
}

std::string noise_problem(const Summary& s) {
  std::string why;
  if (s.n > 0 && s.n < kTrustedSteps) why = std::to_string(s.n) + (s.n == 1 ? " timed step" : " timed steps");
  if (s.mean > 0 && s.std > kNoisySpread * s.mean)
    why += (why.empty() ? "" : ", ") + std::string("±") + std::to_string(static_cast<int>(std::lround(100 * s.std / s.mean))) + " % spread";
  return why;
}

}  // namespace lmscale
