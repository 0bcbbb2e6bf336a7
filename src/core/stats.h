// Summary statistics of repeated timings (mean, sample std, median, min, max). Pure functions.
#pragma once
#include <vector>

namespace lmscale {

struct Summary {
  double mean = 0, std = 0, median = 0, min = 0, max = 0;
  int n = 0;
};

// Sample standard deviation (n-1); a single sample has std 0. Empty input gives all zeros.
Summary summarize(std::vector<double> samples);

}  // namespace lmscale
