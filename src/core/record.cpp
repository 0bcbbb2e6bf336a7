// The record builder and the reader's mapping of older records; see record.h and
// docs/results/SCHEMA.md.
#include "core/record.h"

#include <map>
#include <stdexcept>

namespace lmscale {

Record::Record(const std::string& bench, const std::string& impl) {
  const RunInfo& r = run_info();
  json_ = Json{{field::schema, kSchemaVersion}, {field::bench, bench},   {field::impl, impl},
               {field::status, to_string(Status::ok)}, {field::gpu, r.gpu}, {field::commit, r.commit},
               {field::date, r.date},                {field::command, r.command}};
}

Record& Record::set(const std::string& key, Json value) {
  json_[key] = std::move(value);
  return *this;
}

Record& Record::update(const Json& fields) {
  for (auto it = fields.begin(); it != fields.end(); ++it) json_[it.key()] = it.value();
  return *this;
}

Record& Record::set_status(Status s, const std::string& reason) {
  json_[field::status] = to_string(s);
  if (reason.empty())
    json_.erase(field::reason);
  else
    json_[field::reason] = reason;
  return *this;
}

Record& Record::set_status(const std::string& word, const std::string& reason) {
  return set_status(status_from_string(word), reason);
}

Status Record::status() const { return status_from_string(json_.at(field::status).get<std::string>()); }

Json Record::metric(const std::string& name, Json value, const std::string& unit) const {
  Json j = json_;
  j[field::metric] = name;
  j[field::value] = std::move(value);
  j[field::unit] = unit;
  return j;
}

Json Record::metric(const std::string& name, const Summary& s, const std::string& unit) const {
  Json j = metric(name, s.mean, unit);
  j.update(Json{{field::std_dev, s.std}, {field::median, s.median}, {field::min, s.min}, {field::max, s.max},
                {field::n, s.n}});
  return j;
}

Json Record::failure() const { return metric(kStatusMetric, nullptr, ""); }

Json metric_record(const std::string& bench, const std::string& impl, const Json& config, const std::string& metric,
                   double value, const std::string& unit) {
  return Record(bench, impl).update(config).metric(metric, value, unit);
}

namespace {

void rename_field(Json& j, const char* old_name, const char* new_name) {
  auto it = j.find(old_name);
  if (it == j.end()) return;
  if (!j.contains(new_name)) j[new_name] = *it;
  j.erase(old_name);
}

}  // namespace

Json normalize_record(Json j) {
  if (!j.is_object()) return j;
  const auto version = j.find(field::schema);
  if (version != j.end() && (!version->is_number_integer() || version->get<int64_t>() >= kSchemaVersion)) return j;

  // Version 1: no schema field, names that differed between benchmarks.
  const std::string bench = j.value(field::bench, "");
  rename_field(j, "dtype", field::precision);
  rename_field(j, "seq", field::context);
  if (bench == "profile") rename_field(j, "rank", field::position);

  std::string metric = j.value(field::metric, "");
  static const std::map<std::string, std::string> kMetricNames = {
      {"step_time", "step_ms"},         {"fwd_bwd_time", "fwd_bwd_ms"},       {"exposed_comm_time", "exposed_comm_ms"},
      {"optimizer_time", "optimizer_ms"}, {"model_overhead", "model_overhead_ms"}, {"backward_time", "backward_ms"}};
  if (bench == "ddp" || bench == "zero") {
    if (auto it = kMetricNames.find(metric); it != kMetricNames.end()) metric = it->second;
  }
  if (bench == "comm" && metric == "time") metric = "time_ms";
  if (bench == "lab" && metric == "dtype") metric = "tensor_dtype";
  if (bench == "lab" && metric == "error") {  // the message was the value
    j[field::status] = to_string(Status::error);
    if (j.contains(field::value) && j[field::value].is_string()) j[field::reason] = j[field::value];
    j[field::value] = nullptr;
    metric = kStatusMetric;
  }
  if (j.contains(field::metric)) j[field::metric] = metric;
  if (j.value(field::unit, "") == "B") j[field::unit] = "bytes";
  if (j.value(field::unit, "") == "count") j[field::unit] = "";

  // Status: the old spellings, or none at all (then a number means it was measured).
  Status status = Status::ok;
  if (j.contains(field::status) && j[field::status].is_string()) {
    try {
      status = status_from_string(j[field::status].get<std::string>());
    } catch (const std::invalid_argument& e) {
      status = Status::error;
      if (!j.contains(field::reason)) j[field::reason] = e.what();
    }
  } else if (j.contains(field::value) && j[field::value].is_null()) {
    status = Status::error;
  }
  j[field::status] = to_string(status);
  if (status != Status::ok) {
    for (const char* old_reason : {"message", "error", "note"}) rename_field(j, old_reason, field::reason);
  } else if (j.contains("message") && j["message"].is_string() && j["message"].get<std::string>().empty()) {
    j.erase("message");
  }
  j[field::schema] = kSchemaVersion;
  return j;
}

}  // namespace lmscale
