// The kernel-profile report: renders a ProfileReport (profile_run.h) as markdown tables per phase
// (top kernels, attention parts) plus one record per row, and writes <out>/profile.{jsonl,md}.
#pragma once
#include <string>

#include "profile/profile_run.h"

namespace lmscale {

// What the report is labelled with (the setup's own names are used when these are empty).
struct ProfileReportOptions {
  std::string size, precision, attention;
  int top = 10;                   // rows per phase
  std::string out = "results";    // folder of profile.jsonl / profile.md
};

// Prints the markdown to stdout, appends the records, writes the markdown; returns the markdown.
std::string write_profile_report(const ProfileOptions& options, const ProfileReport& r,
                                 const ProfileReportOptions& report);

}  // namespace lmscale
