// Summary statistics of repeated timings (mean, sample std, median, min, max), and the noise guard:
// when a mean is not to be trusted. Pure functions.
#pragma once
#include <string>
#include <vector>

namespace lmscale {

struct Summary {
  double mean = 0, std = 0, median = 0, min = 0, max = 0;
  int n = 0;
};

// Sample standard deviation (n-1); a single sample has std 0. Empty input gives all zeros.
Summary summarize(std::vector<double> samples);

// The noise guard. A timed mean whose standard deviation exceeds this fraction of it says little
// (a contended CPU gives ±100 %; a quiet GPU step stays within a few %), and so does one over fewer
// timed steps than kTrustedSteps. Tables flag such cells and say how to measure them properly.
inline constexpr double kNoisySpread = 0.10;
inline constexpr int kTrustedSteps = 5;
// "" when the mean can be trusted, else why not ("±127 % spread", "2 timed steps").
std::string noise_problem(const Summary& s);

}  // namespace lmscale
