// The record builder: schema, status, provenance and metric in every record; the command line it
// records can be pasted back into a shell.
#include <gtest/gtest.h>

#include <limits>

#include "core/process.h"
#include "results/record.h"

namespace lmscale {
namespace {

TEST(Record, CarriesSchemaStatusProvenanceAndMetric) {
  Record r("e2e", "lmscale");
  r.set(field::context, 128).set(field::precision, "bf16");
  Summary s;
  s.mean = 2.5;
  s.std = 0.1;
  s.n = 5;
  const Json j = r.metric("step_ms", s, "ms");
  EXPECT_EQ(j[field::schema], kSchemaVersion);
  EXPECT_EQ(j[field::status], "ok");
  EXPECT_FALSE(j.contains(field::reason));
  EXPECT_EQ(j[field::value], 2.5);
  EXPECT_EQ(j[field::std_dev], 0.1);
  EXPECT_EQ(j[field::n], 5);
  EXPECT_EQ(j[field::context], 128);
  for (const char* k : {field::gpu, field::commit, field::date, field::command}) EXPECT_TRUE(j.contains(k)) << k;

  const Json f = r.set_status(Status::oom, "CUDA out of memory").failure();
  EXPECT_EQ(f[field::status], "oom");
  EXPECT_EQ(f[field::reason], "CUDA out of memory");
  EXPECT_EQ(f[field::metric], kStatusMetric);
  EXPECT_TRUE(f[field::value].is_null());
  EXPECT_EQ(Record("x", "y").set_status("OOM").status(), Status::oom);  // old spelling read once
}

TEST(RunCommand, IsQuotedSoItCanBePastedBack) {
  EXPECT_EQ(display_command({"lmscale", "report", "--out", "a b", "it's"}),
            "lmscale report --out 'a b' 'it'\\''s'");
}

// JSON has no NaN or infinity (nlohmann writes null): a measured one is never a silent null marked ok.
TEST(Record, NeverHoldsANumberJsonCannotCarry) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const Json m = Record("e2e", "lmscale").metric("step_ms", nan, "ms");
  EXPECT_TRUE(m["value"].is_null());
  EXPECT_EQ(m["status"], "error");
  EXPECT_NE(m.value("reason", "").find("step_ms measured nan"), std::string::npos) << m.dump();
  // A cell that failed already keeps its own status and reason.
  const Json oom = Record("e2e", "lmscale").set_status(Status::oom, "out of memory").metric("step_ms", inf, "ms");
  EXPECT_EQ(oom["status"], "oom");
  EXPECT_EQ(oom["reason"], "out of memory");
  EXPECT_EQ(to_string(Status::diverged), "diverged");
  EXPECT_EQ(status_from_string("diverged"), Status::diverged);
  EXPECT_TRUE(is_failure(Status::diverged));
}

}  // namespace
}  // namespace lmscale
