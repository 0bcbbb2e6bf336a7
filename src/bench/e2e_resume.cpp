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

// A result read back from e2e.jsonl, with the invocation (date) and commit that measured it.
struct PreviousResult {
  E2EResult result;
  std::string date, commit;
};

// Results in the file by record_key; of several invocations the one appended last (the latest) wins.
std::map<std::string, PreviousResult> previous_results(const std::string& path) {
  std::map<std::string, PreviousResult> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || j.value("bench", "") != "e2e" || !j.contains("metric")) continue;
    const std::string key = record_key(j), date = j.value("date", "");
    auto it = out.find(key);
    if (it != out.end() && it->second.date != date) out.erase(it);  // a newer run of the same config
    PreviousResult& prev = out[key];
    prev.date = date;
    prev.commit = j.value("commit", "");
    try {
      add_e2e_record(j, prev.result);
    } catch (const std::exception&) {  // a status word this reader does not know: measure it again
      out.erase(key);
    }
  }
  return out;
}

}  // namespace

size_t resume_from(const std::string& path, SweepResults& st) {
  std::set<std::string> commits;
  const auto previous = previous_results(path);
  size_t filled = 0;
  for (size_t k = 0; k < st.impls.size(); ++k)
    for (size_t i = 0; i < st.configs.size(); ++i) {
      auto it = previous.find(config_key(st.configs[i], st.impls[k]));
      if (it == previous.end()) continue;
      const E2EResult& r = it->second.result;
      if (r.status == Status::oom || (r.status == Status::ok && r.total.n > 0)) {
        st.results[k][i] = r;
        st.run_of[k][i] = it->second.date;
        commits.insert(it->second.commit);
        ++filled;
      }
    }
  for (const auto& c : commits) st.resumed_commits += (st.resumed_commits.empty() ? "" : ", ") + c;
  st.resumed += filled;
  return filled;
}

}  // namespace lmscale
