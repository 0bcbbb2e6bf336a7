// The record builder: schema, status, provenance and metric in every record; the command line it
// records can be pasted back into a shell.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace lmscale
