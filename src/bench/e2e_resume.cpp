// Reading a sweep's earlier results back; see e2e_resume.h.
#include "bench/e2e_resume.h"

#include <fstream>
#include <map>
#include <set>

namespace lmscale {
namespace {

// Identifies a measurement in e2e.jsonl: config, impl and the run settings that change numbers.
std::string record_key(const Json& j) {
  Json k;
  for (const char* f : {"impl", "size", "d_model", "d_ff", "layers", "heads", "vocab", "context", "batch", "precision",
                        "mode", "attention", "device", "warmup", "steps", "cuda_graph", "gpu"})
    k[f] = j.contains(f) ? j[f] : Json();
  return k.dump();
}

std::string config_key(const E2EConfig& c, const std::string& impl) {
  E2EResult none;
  none.status = Status::oom;  // any failed status: one record with every config field
  return record_key(e2e_records(c, none, impl).front());
}

// A result read back from e2e.jsonl, with the invocation (run id) and commit that measured it, and
// which of the metrics a measured cell always has were there.
struct PreviousResult {
  E2EResult result;
  std::string run, commit;
  bool has_tokens = false, has_steps = false;
  bool complete() const { return result.total.n > 0 && has_tokens && has_steps; }
};

// The invocation that wrote a record: its run id (older records: date and command).
std::string run_of(const Json& j) {
  return j.contains("run") ? j.value("run", "") : j.value("date", "") + " " + j.value("command", "");
}

// Results in the file by record_key; of several invocations the one appended last (the latest) wins.
std::map<std::string, PreviousResult> previous_results(const std::string& path) {
  std::map<std::string, PreviousResult> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || j.value("bench", "") != "e2e" || !j.contains("metric")) continue;
    const std::string key = record_key(j), run = run_of(j);
    auto it = out.find(key);
    if (it != out.end() && it->second.run != run) out.erase(it);  // a newer run of the same config
    PreviousResult& prev = out[key];
    prev.run = run;
    prev.commit = j.value("commit", "");
    prev.has_tokens |= j.value("metric", "") == "tokens_per_s";
    prev.has_steps |= j.value("metric", "") == "all_step_ms";
    try {
      add_e2e_record(j, prev.result);
    } catch (const std::exception&) {  // a status word this reader does not know: measure it again
      out.erase(key);
    }
  }
  return out;
}

}  // namespace

ResumeCount resume_from(const std::string& path, SweepResults& st) {
  std::set<std::string> commits;
  const auto previous = previous_results(path);
  ResumeCount count;
  for (size_t k = 0; k < st.impls.size(); ++k)
    for (size_t i = 0; i < st.configs.size(); ++i) {
      auto it = previous.find(config_key(st.configs[i], st.impls[k]));
      if (it == previous.end()) continue;
      const E2EResult& r = it->second.result;
      if (r.status == Status::ok && !it->second.complete()) {
        ++count.incomplete;
        continue;
      }
      if (r.status == Status::oom || r.status == Status::ok) {
        st.results[k][i] = r;
        st.run_of[k][i] = it->second.run;
        commits.insert(it->second.commit);
        ++count.kept;
      }
    }
  for (const auto& c : commits) st.resumed_commits += (st.resumed_commits.empty() ? "" : ", ") + c;
  st.resumed += count.kept;
  return count;
}

}  // namespace lmscale
