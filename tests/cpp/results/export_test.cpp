// `lmscale report --export`: CSV (one row per record, nested fields flattened, RFC 4180 quoting) and
// TensorBoard event files, the latter decoded here by a reader written from the format's spec (TFRecord
// framing with masked CRC-32C, Event and Summary protobufs), so a wrong byte fails the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "results/export.h"
#include "support/run_cli.h"

namespace lmscale {
namespace {

using testing::run_cli_argv;
using testing::read_text;
using testing::temp_dir;

// ---------------------------------------------------------------- a reader of event files

uint64_t read_varint(const std::string& s, size_t* at) {
  uint64_t v = 0;
  for (int shift = 0; *at < s.size(); shift += 7) {
    const auto b = static_cast<unsigned char>(s[(*at)++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  ADD_FAILURE() << "varint runs past the end";
  return v;
}

// Field number -> raw payload (the last one of each number), of one protobuf message.
std::map<int, std::string> fields(const std::string& msg) {
  std::map<int, std::string> out;
  size_t at = 0;
  while (at < msg.size()) {
    const uint64_t k = read_varint(msg, &at);
    const int number = static_cast<int>(k >> 3), wire = static_cast<int>(k & 7);
    size_t n = wire == 1 ? 8 : wire == 5 ? 4 : 0;
    if (wire == 0) {
      const size_t start = at;
      read_varint(msg, &at);
      out[number] = msg.substr(start, at - start);
      continue;
    }
    if (wire == 2) n = read_varint(msg, &at);
    EXPECT_LE(at + n, msg.size()) << "field " << number << " runs past the end";
    out[number] = msg.substr(at, n);
    at += n;
  }
  return out;
}

struct Decoded {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version, tag;
  float value = 0;
};

std::vector<Decoded> decode_events(const std::string& file) {
  std::vector<Decoded> events;
  size_t at = 0;
  while (at < file.size()) {
    EXPECT_LE(at + 12, file.size());
    const std::string length = file.substr(at, 8);
    uint64_t n = 0;
    uint32_t length_crc = 0, data_crc = 0;
    std::memcpy(&n, length.data(), 8);
    std::memcpy(&length_crc, file.data() + at + 8, 4);
    EXPECT_EQ(length_crc, masked_crc32c(length)) << "length CRC of the record at byte " << at;
    const std::string data = file.substr(at + 12, n);
    std::memcpy(&data_crc, file.data() + at + 12 + n, 4);
    EXPECT_EQ(data_crc, masked_crc32c(data)) << "data CRC of the record at byte " << at;
    at += 12 + n + 4;
    auto f = fields(data);
    Decoded e;
    std::memcpy(&e.wall_time, f[1].data(), 8);
    size_t p = 0;
    e.step = static_cast<int64_t>(read_varint(f[2], &p));
    e.file_version = f.count(3) ? f[3] : "";
    if (f.count(5)) {
      auto value = fields(fields(f[5])[1]);
      e.tag = value[1];
      std::memcpy(&e.value, value[2].data(), 4);
    }
    events.push_back(e);
  }
  return events;
}

// ---------------------------------------------------------------- the tests

TEST(Export, Crc32cMatchesTheCastagnoliCheckValue) {
  EXPECT_EQ(crc32c("123456789"), 0xe3069283u);  // the CRC-32C catalogue's check value
  EXPECT_EQ(crc32c(""), 0u);
}

TEST(Export, CsvHasOneRowPerRecordFlattenedAndQuoted) {
  std::vector<Json> records = {
      Json{{"bench", "e2e"}, {"metric", "step_ms"}, {"value", 1.5}, {"command", "lmscale bench --size \"a,b\""},
           {"model", Json{{"d", 64}, {"layers", 2}}}, {"all_step_ms", Json::array({1, 2})}},
      Json{{"bench", "e2e"}, {"metric", "status"}, {"value", nullptr}, {"reason", "out of memory\non cuda:0"}}};
  const std::string csv = records_csv(records);
  std::istringstream lines(csv);
  std::string header;
  std::getline(lines, header);
  EXPECT_EQ(header.rfind("run,date,commit,command,bench,impl,metric,value,unit,status,reason,gpu,schema,", 0), 0u)
      << header;
  EXPECT_NE(header.find(",all_step_ms,model.d,model.layers"), std::string::npos) << header;
  EXPECT_NE(csv.find("\"lmscale bench --size \"\"a,b\"\"\""), std::string::npos) << csv;
  EXPECT_NE(csv.find(",\"[1,2]\""), std::string::npos) << csv;       // arrays as JSON text, quoted (a comma)
  EXPECT_NE(csv.find("\"out of memory\non cuda:0\""), std::string::npos) << csv;  // newline kept inside quotes
  EXPECT_NE(csv.find(",status,,"), std::string::npos) << csv;        // null value: an empty cell
  size_t rows = 0;
  for (char c : csv) rows += c == '\n';
  EXPECT_EQ(rows, 1 + 2 + 1);  // header, two records, the newline inside the quoted reason
}

TEST(Export, TensorBoardEventsDecodeToTheScalarsWritten) {
  const std::vector<Scalar> scalars = {{0, "val_loss", 9.25f, 1000.0}, {10, "train_loss", 7.5f, 1001.5}};
  const auto events = decode_events(tensorboard_events(scalars));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[1].tag, "val_loss");
  EXPECT_EQ(events[1].value, 9.25f);
  EXPECT_EQ(events[1].wall_time, 1000.0);
  EXPECT_EQ(events[2].step, 10);
  EXPECT_EQ(events[2].tag, "train_loss");
  EXPECT_EQ(events[2].value, 7.5f);
}

// Through the CLI: a folder of train records exports one event folder per run (lr beside the train
// loss), and the CSV of every file; unknown formats and empty exports are usage errors (exit 2).
TEST(Export, ReportExportsTrainCurvesAndCsvFromTheInFolders) {
  const std::string dir = temp_dir("export");
  std::filesystem::create_directories(dir + "/in");
  std::ofstream train(dir + "/in/train.jsonl");
  for (int step : {0, 10, 20}) {
    Json common = {{"schema", 2},  {"bench", "train"}, {"impl", "lmscale"}, {"status", "ok"}, {"unit", "nats"},
                   {"size", "tiny"}, {"precision", "fp32"},
                   {"run", "0123456789abcdef"}, {"date", "2026-12-01T10:00:00Z"}, {"step", step},
                   {"elapsed_s", step * 0.5}, {"lr_now", step * 1e-4}};
    Json val = common, tr = common;
    val["metric"] = "val_loss";
    val["value"] = 9.0 - step * 0.1;
    tr["metric"] = "train_loss";
    tr["value"] = 9.5 - step * 0.1;
    train << val.dump() << "\n";
    if (step) train << tr.dump() << "\n";
    Json bf16 = val;  // a second curve of the same run (train --precision fp32,bf16): a folder of its own
    bf16["precision"] = "bf16";
    train << bf16.dump() << "\n";
  }
  train.close();
  std::ofstream(dir + "/in/e2e.jsonl") << Json{{"schema", 2}, {"bench", "e2e"}, {"metric", "step_ms"}, {"value", 3}}.dump()
                                       << "\n";

  auto tb = run_cli_argv({"report", "--in", dir + "/in", "--export", "tensorboard", dir + "/tb"});
  ASSERT_EQ(tb.exit_code, 0) << tb.output;
  const std::string run = dir + "/tb/2026-12-01T10-00-00Z_lmscale_tiny_fp32_01234567";
  EXPECT_TRUE(std::filesystem::is_directory(dir + "/tb/2026-12-01T10-00-00Z_lmscale_tiny_bf16_01234567")) << tb.output;
  ASSERT_TRUE(std::filesystem::is_directory(run)) << tb.output;
  std::string file;
  for (const auto& e : std::filesystem::directory_iterator(run)) file = e.path().string();
  EXPECT_NE(file.find("events.out.tfevents."), std::string::npos) << file;
  const auto events = decode_events(read_text(file));
  std::map<std::string, std::vector<int64_t>> steps_by_tag;
  for (const auto& e : events)
    if (!e.tag.empty()) steps_by_tag[e.tag].push_back(e.step);
  EXPECT_EQ(steps_by_tag["val_loss"], (std::vector<int64_t>{0, 10, 20}));
  EXPECT_EQ(steps_by_tag["train_loss"], (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(steps_by_tag["lr"], (std::vector<int64_t>{10, 20}));
  EXPECT_FALSE(std::filesystem::exists(dir + "/in/index.md")) << "--export alone writes no report";

  auto csv = run_cli_argv({"report", "--in", dir + "/in", "--export", "csv", dir + "/csv"});
  ASSERT_EQ(csv.exit_code, 0) << csv.output;
  EXPECT_NE(read_text(dir + "/csv/e2e.csv").find(",e2e,,step_ms,3,"), std::string::npos) << read_text(dir + "/csv/e2e.csv");
  const std::string train_csv = read_text(dir + "/csv/train.csv");
  EXPECT_EQ(std::count(train_csv.begin(), train_csv.end(), '\n'), 1 + 8) << train_csv;

  auto bad = run_cli_argv({"report", "--in", dir + "/in", "--export", "parquet", dir + "/x"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("csv (one row per record) and tensorboard"), std::string::npos) << bad.output;
  std::filesystem::remove(dir + "/in/train.jsonl");
  auto none = run_cli_argv({"report", "--in", dir + "/in", "--export", "tensorboard", dir + "/tb2"});
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_NE(none.output.find("no train.jsonl record with a step"), std::string::npos) << none.output;
}

}  // namespace
}  // namespace lmscale
