// Records as CSV and as TensorBoard event files; see export.h.
#include "results/export.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "results/reader.h"
#include "results/writer.h"

namespace lmscale {
namespace fs = std::filesystem;
namespace {

// ---------------------------------------------------------------- CSV

// The fields every record has (SCHEMA.md, "Fields every record has") lead, in this order; the rest
// follow in the order first seen, so a column means the same in every file.
const std::vector<std::string> kLeadingColumns = {
    field::run, field::date, field::commit, field::command, field::bench, field::impl, field::metric,
    field::value, field::unit, field::status, field::reason, field::gpu, field::schema};

// `prefix.key` -> leaf value, for every leaf of an object (arrays are leaves).
void flatten(const Json& j, const std::string& prefix, std::vector<std::pair<std::string, const Json*>>* out) {
  if (j.is_object() && !j.empty()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      flatten(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
    return;
  }
  out->emplace_back(prefix, &j);
}

std::string csv_cell(const Json* j) {
  std::string text;
  if (j == nullptr || j->is_null()) return "";
  text = j->is_string() ? j->get<std::string>() : j->dump();
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

// ---------------------------------------------------------------- protobuf and TFRecord

void varint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
// A field key: (number << 3) | wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32).
void key(int number, int wire, std::string* out) { varint(static_cast<uint64_t>(number) << 3 | wire, out); }
void bytes_field(int number, const std::string& data, std::string* out) {
  key(number, 2, out);
  varint(data.size(), out);
  *out += data;
}
template <typename T>
void fixed_field(int number, T v, std::string* out) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "fixed32 or fixed64");
  key(number, sizeof(T) == 8 ? 1 : 5, out);
  char raw[sizeof(T)];
  std::memcpy(raw, &v, sizeof(T));  // little-endian, as protobuf's fixed types are on x86-64 and aarch64
  out->append(raw, sizeof(T));
}

// tensorflow/core/util/event.proto: Event { double wall_time = 1; int64 step = 2; oneof what {
// string file_version = 3; Summary summary = 5; } }; summary.proto: Summary { repeated Value value = 1; }
// Value { string tag = 1; float simple_value = 2; }.
std::string event(double wall_time, int64_t step, const std::string* file_version, const Scalar* scalar) {
  std::string e;
  fixed_field(1, wall_time, &e);
  key(2, 0, &e);
  varint(static_cast<uint64_t>(step), &e);
  if (file_version) bytes_field(3, *file_version, &e);
  if (scalar) {
    std::string value;
    bytes_field(1, scalar->tag, &value);
    fixed_field(2, scalar->value, &value);
    std::string summary;
    bytes_field(1, value, &summary);
    bytes_field(5, summary, &e);
  }
  return e;
}

// TFRecord: uint64 length, masked CRC-32C of those 8 bytes, the data, masked CRC-32C of the data.
void tfrecord(const std::string& data, std::string* out) {
  std::string length(8, '\0');
  const uint64_t n = data.size();
  std::memcpy(length.data(), &n, 8);
  const uint32_t length_crc = masked_crc32c(length), data_crc = masked_crc32c(data);
  *out += length;
  out->append(reinterpret_cast<const char*>(&length_crc), 4);
  *out += data;
  out->append(reinterpret_cast<const char*>(&data_crc), 4);
}

// "2026-11-23T15:45:20Z" -> seconds since the epoch (0 when it does not parse).
double epoch_seconds(const std::string& date) {
  std::tm tm{};
  if (!strptime(date.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm)) return 0;
  return static_cast<double>(timegm(&tm));
}

// A curve's folder name (TensorBoard shows it as the run): the run's date (colons out), then what
// tells the curves of one run apart (impl, size, precision: `train --impl lmscale,torch-eager
// --precision bf16,fp8` trains four), then the run id, so folders sort by time. Records written before
// the run id have none; their date and command tell runs apart.
std::string run_folder(const Json& r) {
  std::string date = r.value(field::date, std::string("undated"));
  for (char& c : date)
    if (c == ':') c = '-';
  std::string name = date + "_" + r.value(field::impl, std::string("unknown"));
  for (const char* f : {field::size, field::precision})
    if (r.contains(f) && r[f].is_string()) name += "_" + r[f].get<std::string>();
  if (r.contains(field::run) && r[field::run].is_string()) name += "_" + r[field::run].get<std::string>().substr(0, 8);
  for (char& c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) c = '_';
  return name;
}

}  // namespace

uint32_t crc32c(const std::string& data) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char c : data) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));  // reflected Castagnoli
  }
  return ~crc;
}

uint32_t masked_crc32c(const std::string& data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;  // TFRecord's mask (tensorflow/core/lib/hash/crc32c.h)
}

ExportFormat parse_export_format(const std::string& name) {
  if (name == "csv") return ExportFormat::kCsv;
  if (name == "tensorboard") return ExportFormat::kTensorBoard;
  throw UsageError("--export " + name + ": the formats are csv (one row per record) and tensorboard (the loss "
                   "curves of train.jsonl), e.g. --export csv exported/");
}

std::string records_csv(const std::vector<Json>& records) {
  std::vector<std::vector<std::pair<std::string, const Json*>>> rows;
  std::vector<std::string> columns = kLeadingColumns;
  std::set<std::string> known(columns.begin(), columns.end());
  for (const auto& r : records) {
    rows.emplace_back();
    flatten(r, "", &rows.back());
    for (const auto& [name, _] : rows.back())
      if (known.insert(name).second) columns.push_back(name);
  }
  std::string csv;
  for (size_t c = 0; c < columns.size(); ++c) {
    const Json name = columns[c];
    csv += (c ? "," : "") + csv_cell(&name);
  }
  csv += "\n";
  for (const auto& row : rows) {
    std::map<std::string, const Json*> cells(row.begin(), row.end());
    for (size_t c = 0; c < columns.size(); ++c) {
      const auto it = cells.find(columns[c]);
      csv += (c ? "," : "") + csv_cell(it == cells.end() ? nullptr : it->second);
    }
    csv += "\n";
  }
  return csv;
}

std::string tensorboard_events(const std::vector<Scalar>& scalars) {
  std::string out;
  const std::string version = "brain.Event:2";
  tfrecord(event(scalars.empty() ? 0 : scalars.front().wall_time, 0, &version, nullptr), &out);
  for (const auto& s : scalars) tfrecord(event(s.wall_time, s.step, nullptr, &s), &out);
  return out;
}

std::map<std::string, std::vector<Json>> records_of_folders(const std::vector<std::string>& folders) {
  std::map<std::string, std::vector<Json>> by_file;
  std::set<std::string> seen;
  for (const auto& folder : folders) {
    if (!fs::is_directory(folder))
      throw UsageError("--in " + folder + " is not a folder: pass the --out folder of a benchmark run (e.g. --in results)");
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(folder))
      if (!e.is_symlink() && e.is_regular_file() && e.path().extension() == ".jsonl") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& p : files)
      for (auto& r : read_records(p.string()))
        if (seen.insert(p.stem().string() + "\n" + r.dump()).second) by_file[p.stem().string()].push_back(std::move(r));
  }
  return by_file;
}

ExportSummary export_records(const std::map<std::string, std::vector<Json>>& records_by_file, ExportFormat format,
                             const std::string& dir) {
  ExportSummary summary;
  const fs::path out(dir);
  if (format == ExportFormat::kCsv) {
    for (const auto& [stem, records] : records_by_file) {
      if (records.empty()) continue;
      write_text((out / (stem + ".csv")).string(), records_csv(records));
      summary.files.push_back(stem + ".csv");
      summary.records += records.size();
    }
    if (summary.files.empty())
      throw UsageError("--export csv: the --in folders hold no records; pass the --out folder of a run");
    return summary;
  }
  // TensorBoard: each evaluation of a run (records of train.jsonl with a step) becomes scalars at its
  // step; lr_now rides on the train_loss record.
  std::map<std::string, std::vector<Scalar>> runs;
  const auto it = records_by_file.find("train");
  for (const Json& r : it == records_by_file.end() ? std::vector<Json>{} : it->second) {
    if (!r.contains(field::step) || !r[field::step].is_number_integer()) continue;
    const Json& v = r.value(field::value, Json());
    if (!v.is_number()) continue;  // a diverged evaluation (null): TensorBoard has no place for it
    Scalar s;
    s.step = r[field::step].get<int64_t>();
    s.tag = r.value(field::metric, std::string("value"));
    s.value = v.get<float>();
    s.wall_time = epoch_seconds(r.value(field::date, std::string())) + r.value(field::elapsed_s, 0.0);
    auto& run = runs[run_folder(r)];
    run.push_back(s);
    if (s.tag == "train_loss" && r.contains(field::lr_now) && r[field::lr_now].is_number()) {
      s.tag = "lr";
      s.value = r[field::lr_now].get<float>();
      run.push_back(s);
    }
  }
  if (runs.empty())
    throw UsageError("--export tensorboard: no train.jsonl record with a step in the --in folders (the loss curves "
                     "of `lmscale train`); for the other benchmarks use --export csv");
  for (auto& [folder, scalars] : runs) {
    std::stable_sort(scalars.begin(), scalars.end(), [](const Scalar& a, const Scalar& b) { return a.step < b.step; });
    const long start = static_cast<long>(scalars.front().wall_time);
    const std::string file = folder + "/events.out.tfevents." + std::to_string(start) + ".lmscale";
    fs::create_directories(out / folder);
    write_text((out / file).string(), tensorboard_events(scalars));
    summary.files.push_back(file);
    summary.records += scalars.size();
  }
  return summary;
}

}  // namespace lmscale
