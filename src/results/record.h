// One results schema (docs/results/SCHEMA.md): the field names, written once here, the run's
// provenance, and `Record`, the one way to build a record. A Record holds the fields one measured
// cell shares (provenance, config, status); metric() turns it into the JSON Lines record of one
// metric. Writing is results/writer.h, reading results/reader.h, tables results/table.h.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "core/stats.h"
#include "core/status.h"

namespace lmscale {

using Json = nlohmann::json;

// Provenance shared by every record of one CLI invocation. set_run_command() is called once by the
// CLI's main; library users who never call it get command "" and the detected commit/date.
struct RunInfo {
  std::string command;  // the exact command line, as typed
  std::string date;     // UTC, ISO 8601, taken once per invocation
  std::string commit;   // $LMSCALE_COMMIT, else `git rev-parse --short HEAD` of the source tree
  std::string gpu;      // device name, filled by the benchmark that picks the device
  std::string run;      // unique per invocation (random, not a timestamp): two runs started in the same
                        // second, or writing to one folder at once, stay apart
};
const RunInfo& run_info();
void set_run_command(int argc, char** argv);
void set_run_gpu(const std::string& gpu);

// Version of the records this code writes. Version 1 had no `schema` field (see SCHEMA.md).
inline constexpr int kSchemaVersion = 2;

// Every field name of the schema; the glossary in docs/results/SCHEMA.md says what each means.
namespace field {
// Every record.
inline constexpr char schema[] = "schema";
inline constexpr char bench[] = "bench";
inline constexpr char impl[] = "impl";
inline constexpr char status[] = "status";
inline constexpr char reason[] = "reason";
inline constexpr char metric[] = "metric";
inline constexpr char value[] = "value";
inline constexpr char unit[] = "unit";
inline constexpr char gpu[] = "gpu";
inline constexpr char commit[] = "commit";
inline constexpr char date[] = "date";
inline constexpr char command[] = "command";
inline constexpr char run[] = "run";                        // this invocation's id, unique (not a timestamp)
inline constexpr char cpu_threads[] = "cpu_threads";        // intra-op threads the run used
inline constexpr char load[] = "load";                      // the machine's 1-minute load average when recorded
inline constexpr char injected_fault[] = "injected_fault";  // the fault injected on purpose (LMSCALE_INJECT_FAULT)
inline constexpr char consistency_checks[] = "consistency_checks";  // bench ddp/zero: cross-rank checks passed
// Statistics of a timed metric (same unit as value, which is the mean).
inline constexpr char std_dev[] = "std";
inline constexpr char median[] = "median";
inline constexpr char min[] = "min";
inline constexpr char max[] = "max";
inline constexpr char n[] = "n";
// Configuration.
inline constexpr char device[] = "device";
inline constexpr char size[] = "size";
inline constexpr char d_model[] = "d_model";
inline constexpr char d_ff[] = "d_ff";
inline constexpr char layers[] = "layers";
inline constexpr char blocks[] = "blocks";
inline constexpr char heads[] = "heads";
inline constexpr char vocab[] = "vocab";
inline constexpr char params[] = "params";
inline constexpr char context[] = "context";
inline constexpr char batch[] = "batch";
inline constexpr char precision[] = "precision";
inline constexpr char mode[] = "mode";
inline constexpr char attention[] = "attention";
inline constexpr char head_dim[] = "head_dim";
inline constexpr char causal[] = "causal";
inline constexpr char warmup[] = "warmup";
inline constexpr char steps[] = "steps";
inline constexpr char cuda_graph[] = "cuda_graph";
inline constexpr char cuda_graph_note[] = "cuda_graph_note";
inline constexpr char backend[] = "backend";
inline constexpr char world[] = "world";
inline constexpr char op[] = "op";
inline constexpr char size_bytes[] = "size_bytes";
inline constexpr char size_mb[] = "size_mb";
inline constexpr char iters[] = "iters";
inline constexpr char bucket_mb[] = "bucket_mb";
inline constexpr char n_buckets[] = "n_buckets";
inline constexpr char first_bucket_mb[] = "first_bucket_mb";
inline constexpr char comm_dtype[] = "comm_dtype";
inline constexpr char fused[] = "fused";
inline constexpr char nccl[] = "nccl";
inline constexpr char step[] = "step";
inline constexpr char phase[] = "phase";
inline constexpr char position[] = "position";
inline constexpr char kernel[] = "kernel";
inline constexpr char attention_part[] = "attention_part";
inline constexpr char time_kind[] = "time_kind";
inline constexpr char experiment[] = "experiment";
inline constexpr char tensor[] = "tensor";
// Training (lmscale train): the run's settings and each evaluation's.
inline constexpr char seed[] = "seed";
inline constexpr char lr[] = "lr";                  // peak learning rate
inline constexpr char lr_min[] = "lr_min";          // the cosine's floor
inline constexpr char lr_warmup[] = "lr_warmup";    // steps of linear warm-up
inline constexpr char lr_now[] = "lr_now";          // the learning rate of the record's step
inline constexpr char clip[] = "clip";
inline constexpr char eval_every[] = "eval_every";
inline constexpr char eval_batches[] = "eval_batches";
inline constexpr char corpus[] = "corpus";
inline constexpr char fp8_min_dim[] = "fp8_min_dim";  // Fp8Layers::min_dim of an fp8 run
inline constexpr char fp8_scaling[] = "fp8_scaling";  // Fp8Layers::scaling of an fp8 run: delayed or dynamic
inline constexpr char train_tokens[] = "train_tokens";
inline constexpr char val_tokens[] = "val_tokens";
inline constexpr char corpus_hash[] = "corpus_hash";  // token_file.h's content hash of train then val
inline constexpr char pack[] = "pack";                // true: --pack, attention within each document
inline constexpr char elapsed_s[] = "elapsed_s";
inline constexpr char torch_attention[] = "torch_attention";
}  // namespace field

// The metric name of a cell that produced no numbers (its status and reason say why).
inline constexpr char kStatusMetric[] = "status";

class Record {
 public:
  // bench, impl, schema, status ok, the run's provenance (gpu, commit, date, command, run) and the
  // CPU it ran on now (cpu_threads, load: what explains a noisy number).
  Record(const std::string& bench, const std::string& impl);

  // Sets one field (a name from lmscale::field, or a bench-specific extra). A field set from a flag is
  // finite: the CLI refuses NaN and infinite values (which JSON writes as null) before anything runs.
  Record& set(const std::string& key, Json value);
  // Merges every field of a JSON object (a config shared by several records).
  Record& update(const Json& fields);
  // The cell's outcome; a reason is kept for any status (a note on an ok cell that ran differently).
  Record& set_status(Status s, const std::string& reason = "");
  // The same from a status word (old spellings like "OOM" read as status_from_string does).
  Record& set_status(const std::string& word, const std::string& reason = "");
  Status status() const;

  // The record of one metric of this cell. A NaN or infinite value is written as null with status
  // error and a reason naming it (unless the cell already failed): never a silent null marked ok.
  Json metric(const std::string& name, Json value, const std::string& unit) const;
  // A timed metric: value is the mean, with std/median/min/max/n.
  Json metric(const std::string& name, const Summary& s, const std::string& unit) const;
  // The one record of a cell that produced no numbers: metric "status", value null.
  Json failure() const;

  const Json& json() const { return json_; }

 private:
  Json json_;
};

}  // namespace lmscale
