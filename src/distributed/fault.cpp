// Fault reports and the cross-rank consistency check; see fault.h.
#include "distributed/fault.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <c10/core/GradMode.h>

#include <future>
#include <memory>
#include <sstream>
#include <thread>

#include "core/fault_injection.h"

namespace lmscale::distributed {
namespace {

std::string progress_key(const std::string& what, int rank) { return what + "/rank" + std::to_string(rank); }

std::string first_line(const std::string& s) {
  const auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

// Last step each other rank published, or -1 when it never did; nullopt-like empty vector when the
// store did not answer within the deadline.
std::vector<int64_t> last_steps(const Group& group, const std::string& what, std::chrono::milliseconds deadline) {
  auto result = std::make_shared<std::promise<std::vector<int64_t>>>();
  auto future = result->get_future();
  // Detached: a store whose server is stopped blocks the reader; the report must not block with it.
  std::thread([store = group.store, what, world = group.world_size, result] {
    try {
      std::vector<int64_t> steps(static_cast<size_t>(world), -1);
      for (int r = 0; r < world; ++r) {
        const std::string key = progress_key(what, r);
        if (!store->check({key})) continue;
        auto v = store->get(key);
        steps[static_cast<size_t>(r)] = std::stoll(std::string(v.begin(), v.end()));
      }
      result->set_value(std::move(steps));
    } catch (...) {
      result->set_value({});
    }
  }).detach();
  if (future.wait_for(deadline) != std::future_status::ready) return {};
  return future.get();
}

}  // namespace

void publish_progress(const Group& group, const std::string& what, int64_t step) {
  if (!group.store || group.world_size == 1) return;
  try {
    const std::string v = std::to_string(step);
    group.store->set(progress_key(what, group.rank), std::vector<uint8_t>(v.begin(), v.end()));
  } catch (const std::exception&) {
    // Best-effort: the collective that follows reports the real failure.
  }
}

std::string explain_collective_failure(const Group& group, const std::string& what, const std::string& collective,
                                       int64_t step, const std::exception& cause) {
  std::ostringstream os;
  const std::string raw = first_line(cause.what());
  const bool timed_out = raw.find("imed out") != std::string::npos || raw.find("imeout") != std::string::npos;
  os << "rank " << group.rank << " of " << group.world_size << ": " << collective << " in " << what;
  if (step >= 0) os << " step " << step;
  os << (timed_out ? " timed out" : " failed") << " (" << backend_name(group.kind) << ": " << raw << ").";
  if (group.store && step >= 0) {
    auto steps = last_steps(group, what, std::chrono::seconds(5));
    if (steps.empty()) {
      os << " The rendezvous store (served by rank 0) did not answer within 5 s: rank 0 may be the stuck one.";
    } else {
      std::vector<std::string> missing;
      for (int r = 0; r < group.world_size; ++r)
        if (r != group.rank && steps[static_cast<size_t>(r)] < step)
          missing.push_back(std::to_string(r) + (steps[static_cast<size_t>(r)] < 0
                                                     ? " (never reported a step)"
                                                     : " (last at step " + std::to_string(steps[static_cast<size_t>(r)]) + ")"));
      if (missing.empty()) {
        os << " Every rank reached step " << step << " according to the rendezvous store, so one stalled inside "
           << "this collective (stopped, killed, or cut off from the others).";
      } else {
        os << " Ranks that did not arrive at step " << step << ": ";
        for (size_t k = 0; k < missing.size(); ++k) os << (k ? ", " : "") << missing[k];
        os << ".";
      }
    }
  }
  os << " The collective timeout is " << collective_timeout_from_env().count() / 1000
     << " s (LMSCALE_DIST_TIMEOUT_S; default " << kDefaultCollectiveTimeout.count() << " s)."
     << " Likely causes: a rank died, stopped or is much slower (look at its own output), or the ranks ran "
        "different numbers of steps or backward passes.";
  return os.str();
}

void wait_explained(const c10::intrusive_ptr<c10d::Work>& work, const Group& group, const std::string& what,
                    const std::string& collective, int64_t step) {
  run_explained(group, what, collective, step, [&] { wait(work); });
}

void wait_quietly(c10::intrusive_ptr<c10d::Work>& work) {
  if (!work) return;
  try {
    work->wait();
  } catch (...) {
    // Reported by finish already, or the process is going down.
  }
  work.reset();
}

int64_t bit_checksum(const at::Tensor& t) {
  c10::NoGradGuard no_grad;
  at::Tensor c = t.detach().contiguous().reshape({-1});
  switch (c.element_size()) {
    case 8: c = c.view(at::kLong); break;
    case 4: c = c.view(at::kInt); break;
    case 2: c = c.view(at::kShort); break;
    default: c = c.view(at::kByte); break;
  }
  // Integer sum on the tensor's device (wraps identically everywhere), one scalar to the host.
  return c.sum(at::kLong).cpu().item<int64_t>();
}

void check_parameter_consistency(const Group& group, const std::vector<std::pair<std::string, at::Tensor>>& named,
                                 int64_t step) {
  const int64_t n = static_cast<int64_t>(named.size());
  std::vector<int64_t> sums;
  sums.push_back(n);
  for (const auto& [name, t] : named) sums.push_back(bit_checksum(t));
  const auto opts = at::TensorOptions().dtype(at::kLong).device(group.device);
  std::vector<at::Tensor> in{at::tensor(sums, at::kLong).to(group.device)};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < group.world_size; ++r) out[0].push_back(at::empty({n + 1}, opts));
  wait_explained(group.backend->allgather(out, in), group, "consistency check", "all-gather of parameter checksums",
                 step);
  std::vector<at::Tensor> all;
  for (auto& t : out[0]) all.push_back(t.cpu());
  for (int r = 1; r < group.world_size; ++r)
    TORCH_CHECK(all[r][0].item<int64_t>() == n, "consistency check at step ", step, ": rank 0 checks ", n,
                " parameters but rank ", r, " checks ", all[r][0].item<int64_t>(), "; every rank must pass the same list.");
  for (int64_t k = 0; k < n; ++k) {
    const int64_t ref = all[0][k + 1].item<int64_t>();
    std::vector<int> differ;
    for (int r = 1; r < group.world_size; ++r)
      if (all[r][k + 1].item<int64_t>() != ref) differ.push_back(r);
    if (differ.empty()) continue;
    std::ostringstream os;
    for (size_t i = 0; i < differ.size(); ++i) os << (i ? ", " : "") << differ[i];
    TORCH_CHECK(false, "consistency check at step ", step, ": parameter '", named[static_cast<size_t>(k)].first,
                "' (", k, " of ", n, ", shape ", named[static_cast<size_t>(k)].second.sizes(),
                ") differs between rank 0 and rank(s) ", os.str(), " (bit checksums ", ref, " vs ",
                all[differ[0]][k + 1].item<int64_t>(), "). The ranks have silently diverged: a non-deterministic "
                "or rank-dependent update, a missed gradient synchronisation, or corrupted memory.");
  }
}

bool inject_divergence(const Group& group, const std::vector<std::pair<std::string, at::Tensor>>& named, int64_t step,
                       const std::string& size, int64_t context) {
  if (group.rank != 1 || step != 1 || named.empty() || !fault_injected(InjectedFault::diverge, size, context))
    return false;
  c10::NoGradGuard no_grad;
  named.front().second.view(-1)[0].add_(1.0);
  return true;
}

}  // namespace lmscale::distributed
