// The tolerant reader: old records read in today's names, damaged lines skipped with file:line
// while reading goes on, records of a newer schema kept as written.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "results/reader.h"
#include "support/temp_dirs.h"

namespace lmscale {
namespace {

using testing::temp_dir;

TEST(Record, OldRecordsReadInTodaysNames) {
  const Json attention = normalize_record(Json::parse(
      R"({"bench":"attention","impl":"torch-naive","seq":256,"dtype":"bf16","metric":"fwd_ms","value":null,
          "unit":"ms","status":"OOM","error":"CUDA out of memory"})"));
  EXPECT_EQ(attention[field::context], 256);
  EXPECT_EQ(attention[field::precision], "bf16");
  EXPECT_FALSE(attention.contains("seq"));
  EXPECT_FALSE(attention.contains("dtype"));
  EXPECT_EQ(attention[field::status], "oom");
  EXPECT_EQ(attention[field::reason], "CUDA out of memory");
  EXPECT_EQ(attention[field::schema], kSchemaVersion);

  const Json ddp = normalize_record(Json::parse(
      R"({"bench":"ddp","impl":"lmscale-naive","metric":"step_time","value":12.5,"unit":"ms"})"));
  EXPECT_EQ(ddp[field::metric], "step_ms");
  EXPECT_EQ(ddp[field::status], "ok");
  const Json zero = normalize_record(Json::parse(R"({"bench":"zero","metric":"peak_allocated","value":8,"unit":"B"})"));
  EXPECT_EQ(zero[field::unit], "bytes");
  const Json lab = normalize_record(Json::parse(R"({"bench":"lab","metric":"error","value":"no CUDA","unit":""})"));
  EXPECT_EQ(lab[field::status], "error");
  EXPECT_EQ(lab[field::reason], "no CUDA");
  EXPECT_TRUE(lab[field::value].is_null());

  const Json newer = Json::parse(R"({"schema":99,"bench":"e2e","metric":"m","value":1,"dtype":"kept","future":[1]})");
  EXPECT_EQ(normalize_record(newer), newer);  // passed through untouched, never dropped
}

TEST(ResultsReader, SkipsDamagedLinesNamingThemAndGoesOn) {
  const std::string dir = temp_dir("reader");
  const std::string path = dir + "/e2e.jsonl";
  const std::string good = Record("test", "reader").metric("m", 1, "ms").dump();
  {
    std::ofstream f(path);
    f << good << "\n"
      << "garbage\n"
      << "\n"
      << "[1,2]\n"
      << good << "\n"
      << R"({"schema":99,"bench":"e2e","metric":"new","value":1})" << "\n"
      << R"({"attention":"naive","batch":4,"bench)";  // a line cut by a full disk
  }
  std::ostringstream warnings;
  ReadStats stats;
  const auto records = read_records(path, &stats, &warnings);
  EXPECT_EQ(records.size(), 3u);
  EXPECT_EQ(stats.records, 3u);
  EXPECT_EQ(stats.skipped, 3u);
  EXPECT_EQ(stats.newer, 1u);
  EXPECT_NE(warnings.str().find(path + ":2:"), std::string::npos) << warnings.str();
  EXPECT_NE(warnings.str().find(path + ":4:"), std::string::npos) << warnings.str();
  EXPECT_NE(warnings.str().find(path + ":7:"), std::string::npos) << warnings.str();
  EXPECT_EQ(records[2]["schema"], 99);  // kept as written

  std::ofstream(dir + "/empty.jsonl").close();
  ReadStats none;
  EXPECT_TRUE(read_records(dir + "/empty.jsonl", &none, &warnings).empty());
  EXPECT_EQ(none.skipped, 0u);
  EXPECT_THROW(read_records(dir + "/missing.jsonl"), std::exception);
}

}  // namespace
}  // namespace lmscale
