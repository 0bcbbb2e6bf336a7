// `lmscale report --export csv|tensorboard DIR`: the records of result folders in the formats other
// tools read. CSV: one file per records file, one row per record, nested fields flattened. TensorBoard:
// the loss curves of train.jsonl as event files, one folder per run, written here (TFRecord framing
// around Event protobufs, scalars only) instead of through torch.utils.tensorboard, which needs the
// `tensorboard` package and its protobuf/grpc stack in the interpreter. Merging and tables: merged_report.h.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "results/record.h"

namespace lmscale {

// The two formats; parse_export_format throws UsageError for anything else, naming both.
enum class ExportFormat { kCsv, kTensorBoard };
ExportFormat parse_export_format(const std::string& name);

// One row per record, columns the union of the records' fields in first-seen order (the fields every
// record has first), nested objects flattened to `a.b`, arrays written as JSON text, null as empty.
// RFC 4180 quoting. Exposed for tests.
std::string records_csv(const std::vector<Json>& records);

// The Event-file bytes of one run: the file_version event, then one scalar event per (step, tag,
// value, wall time). Exposed for tests (tests/cpp/results/export_test.cpp decodes them).
struct Scalar {
  int64_t step = 0;
  std::string tag;
  float value = 0;
  double wall_time = 0;  // seconds since the epoch
};
std::string tensorboard_events(const std::vector<Scalar>& scalars);
// CRC-32C (Castagnoli), and TFRecord's masked form of it, which frames every record of an event file.
uint32_t crc32c(const std::string& data);
uint32_t masked_crc32c(const std::string& data);

// The records of every .jsonl file under `folders` (recursively; links skipped, as report does), by
// file stem, each record once, in today's schema (read_records: damaged lines are skipped with a warning).
std::map<std::string, std::vector<Json>> records_of_folders(const std::vector<std::string>& folders);

struct ExportSummary {
  std::vector<std::string> files;  // written, relative to the export folder
  size_t records = 0;              // records exported (csv), or scalars (tensorboard)
};

// Writes `records_by_file` (stem of a .jsonl -> its records, today's schema) into `dir` in `format`:
// <stem>.csv per file; for TensorBoard <run folder>/events.out.tfevents.<time>.lmscale per run of
// train.jsonl (tags train_loss, val_loss, grad_norm, lr). Throws UsageError when there is nothing to
// write (no records; TensorBoard: no train record with a step), ResultWriteError when a write fails.
ExportSummary export_records(const std::map<std::string, std::vector<Json>>& records_by_file, ExportFormat format,
                             const std::string& dir);

}  // namespace lmscale
