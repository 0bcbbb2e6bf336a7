// Validation-loss comparison of training runs; see train_compare.h.
#include "train_app/train_compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "results/record.h"
#include "results/table.h"

namespace lmscale {

namespace {

std::string label(const Json& run) {
  return run.value(field::impl, "?") + " " + run.value(field::precision, "?");
}

bool same_except(const Json& a, const Json& b, const std::vector<std::string>& except) {
  for (const auto& [k, v] : a.items()) {
    if (std::find(except.begin(), except.end(), k) != except.end()) continue;
    if (!b.contains(k) || b[k] != v) return false;
  }
  return true;
}

// step → validation loss of one run, the latest record winning (records are in file order).
std::map<int64_t, double> curve(const std::vector<Json>& records, const Json& run) {
  std::map<int64_t, double> c;
  for (const auto& r : records) {
    if (r.value(field::bench, "") != "train" || r.value(field::metric, "") != "val_loss" ||
        r.value(field::status, "") != "ok" || !r.contains(field::step) || !r[field::value].is_number())
      continue;
    bool same = true;
    for (const auto& [k, v] : run.items())
      if (!r.contains(k) || r[k] != v) same = false;
    if (same) c[r[field::step].get<int64_t>()] = r[field::value].get<double>();
  }
  return c;
}

std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.2f %%", 100 * x);
  return buf;
}

}  // namespace

std::string loss_comparison(const std::vector<Json>& records, const std::vector<Json>& all_runs, int64_t lr_warmup) {
  // Runs with no validation loss (skipped, failed before step 0) get no column and no pair.
  std::vector<Json> runs;
  std::vector<std::map<int64_t, double>> curves;
  for (const auto& r : all_runs) {
    auto c = curve(records, r);
    if (c.empty()) continue;
    runs.push_back(r);
    curves.push_back(std::move(c));
  }
  // The pairs: lmscale against a PyTorch reference at its precision; lmscale at another precision
  // against lmscale bf16.
  std::vector<std::pair<size_t, size_t>> pairs;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].value(field::impl, "") != "lmscale") continue;
    for (size_t j = 0; j < runs.size(); ++j) {
      const std::string ref_impl = runs[j].value(field::impl, "");
      const bool torch_ref = ref_impl.rfind("torch-", 0) == 0 && same_except(runs[i], runs[j], {field::impl});
      const bool bf16_ref = ref_impl == "lmscale" && runs[j].value(field::precision, "") == "bf16" &&
                            runs[i].value(field::precision, "") != "bf16" &&
                            same_except(runs[i], runs[j], {field::precision});
      if (torch_ref || bf16_ref) pairs.emplace_back(i, j);
    }
  }
  std::map<int64_t, bool> steps;
  for (const auto& c : curves)
    for (const auto& [s, v] : c) steps[s] = true;

  std::vector<std::string> headers{"step"};
  for (const auto& r : runs) headers.push_back(label(r) + " val loss");
  for (const auto& [i, j] : pairs) headers.push_back(label(runs[i]) + " vs " + label(runs[j]));
  MarkdownTable t(headers);
  for (const auto& [s, _] : steps) {
    std::vector<std::string> row{std::to_string(s)};
    for (const auto& c : curves) row.push_back(c.count(s) ? fmt(c.at(s), 4) : "-");
    for (const auto& [i, j] : pairs)
      row.push_back(curves[i].count(s) && curves[j].count(s)
                        ? percent((curves[i].at(s) - curves[j].at(s)) / curves[j].at(s))
                        : "-");
    t.add_row(row);
  }
  std::string md = "# Validation loss\n\n";
  if (!runs.empty()) {
    const Json& r = runs.front();
    md += "Size " + r.value(field::size, "?") + ", context " + std::to_string(r.value(field::context, 0)) +
          ", batch " + std::to_string(r.value(field::batch, 0)) + ", " + std::to_string(r.value(field::steps, 0)) +
          " steps, learning-rate warm-up " + std::to_string(lr_warmup) + " steps, corpus " +
          r.value("corpus", "?") + ". The difference is (run − reference) / reference.\n\n";
  }
  md += t.render() + "\n";
  for (const auto& [i, j] : pairs) {
    double worst = 0;
    int64_t at = -1;
    size_t compared = 0;
    for (const auto& [s, v] : curves[i]) {
      if (s <= lr_warmup || !curves[j].count(s)) continue;
      ++compared;
      const double d = std::fabs(v - curves[j].at(s)) / curves[j].at(s);
      if (d >= worst) worst = d, at = s;
    }
    md += "- " + label(runs[i]) + " vs " + label(runs[j]) + ": ";
    if (!compared) {
      md += "no evaluation after warm-up in both runs\n";
      continue;
    }
    md += "largest difference after warm-up " + percent(worst).substr(1) + " (step " + std::to_string(at) + ", " +
          std::to_string(compared) + " evaluations): " +
          (worst <= kLossAgreement ? "within" : "**outside**") + " the " + fmt(100 * kLossAgreement, 0) + " % bound\n";
  }
  return md;
}

}  // namespace lmscale
