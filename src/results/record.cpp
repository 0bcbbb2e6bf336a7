// The run's provenance and the record builder; see record.h and docs/results/SCHEMA.md.
#include "results/record.h"

#include <ATen/Parallel.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <sstream>

#include "core/fault_injection.h"
#include "core/process.h"

namespace lmscale {
namespace {

std::string utc_now() {
  std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string detect_commit() {
  if (const char* c = std::getenv("LMSCALE_COMMIT"); c && *c) return c;
#ifdef LMSCALE_SOURCE_DIR
  // The source tree the binary was built from, if it is still there (a copied binary says "unknown").
  ProcessOptions o;
  o.capture_stdout = true;
  const ProcessResult r = run_process({"git", "-C", LMSCALE_SOURCE_DIR, "rev-parse", "--short", "HEAD"}, o);
  std::string out = r.output;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (r.ok() && !out.empty()) return out;
#endif
  return "unknown";
}

// 64 random bits as 16 hex digits: unique per invocation where a date (one per second) is not.
std::string new_run_id() {
  std::random_device entropy;
  const uint64_t id = (uint64_t{entropy()} << 32) ^ entropy();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(id));
  return buf;
}

// The 1-minute load average (runnable processes), or -1 where the system does not say.
double load_average() {
  double load[1];
  return getloadavg(load, 1) == 1 ? load[0] : -1.0;
}

RunInfo& mutable_run_info() {
  static RunInfo info = [] {
    RunInfo r;
    r.date = utc_now();
    r.run = new_run_id();
    r.commit = detect_commit();
    r.gpu = "cpu";
    return r;
  }();
  return info;
}

}  // namespace

const RunInfo& run_info() { return mutable_run_info(); }

void set_run_command(int argc, char** argv) {
  std::vector<std::string> args{"lmscale"};
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  // Injected faults are part of the command: a run that injected them reads (and re-runs) as such.
  mutable_run_info().command = fault_injection_prefix() + display_command(args);
}

void set_run_gpu(const std::string& gpu) { mutable_run_info().gpu = gpu; }

Record::Record(const std::string& bench, const std::string& impl) {
  const RunInfo& r = run_info();
  json_ = Json{{field::schema, kSchemaVersion}, {field::bench, bench},   {field::impl, impl},
               {field::status, to_string(Status::ok)}, {field::gpu, r.gpu}, {field::commit, r.commit},
               {field::date, r.date},                {field::command, r.command},
               {field::run, r.run},                  {field::cpu_threads, at::get_num_threads()},
               {field::load, load_average()}};
}

namespace {
bool non_finite(const Json& v) { return v.is_number_float() && !std::isfinite(v.get<double>()); }
}  // namespace

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
  if (non_finite(value)) {
    std::ostringstream what;
    what << name << " measured " << value.get<double>() << ", a number JSON cannot carry";
    if (j.value(field::status, "ok") == "ok") {
      j[field::status] = to_string(Status::error);
      j[field::reason] = what.str();
    }
    value = nullptr;
  }
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

}  // namespace lmscale
