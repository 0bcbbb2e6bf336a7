// Distributed faults explained (a bare timeout names no culprit): a collective that fails or times out is reported with
// the rank, the collective, the step, the ranks that never arrived (from the rendezvous store) and
// the timeout setting; a consistency check compares every parameter across ranks and names the
// first one that diverged.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "distributed/process_group.h"

namespace lmscale::distributed {

// Records in the group's store that this rank reached step `step` of `what` ("ddp", "zero2").
// One small store write per step; a failed store write is ignored (the report is best-effort).
void publish_progress(const Group& group, const std::string& what, int64_t step);

// The message for a failed collective: "rank R: <collective> in <what> step S failed: <cause>.",
// then which ranks had not reached step S according to the store (asked with a short deadline: the
// store server lives in rank 0, which may be the stuck one), then the timeout and the variable that
// sets it, then the likely causes. step < 0: a collective outside the training steps (set-up,
// statistics, a benchmark's own collectives): no step is named and the store is not asked.
std::string explain_collective_failure(const Group& group, const std::string& what, const std::string& collective,
                                       int64_t step, const std::exception& cause);

// Runs `collectives` (code that starts collectives of `group` and waits for them, nothing else);
// a failure or timeout throws explain_collective_failure's message instead. One try block around a
// whole timed loop costs nothing per iteration.
template <class Fn>
void run_explained(const Group& group, const std::string& what, const std::string& collective, int64_t step,
                   Fn&& collectives) {
  try {
    collectives();
  } catch (const std::exception& e) {
    TORCH_CHECK(false, explain_collective_failure(group, what, collective, step, e));
  }
}

// Waits for `work`; a failure or timeout throws explain_collective_failure's message instead.
void wait_explained(const c10::intrusive_ptr<c10d::Work>& work, const Group& group, const std::string& what,
                    const std::string& collective, int64_t step);

// Waits for `work` when there is one and drops it, ignoring a failure: the clean-up of a destructor
// (finish already reported the failure, or the process is going down).
void wait_quietly(c10::intrusive_ptr<c10d::Work>& work);

// Exact checksum of a tensor's bits: the sum of its elements reinterpreted as integers of the same
// width (so any single changed bit changes it), as an int64 on the CPU.
int64_t bit_checksum(const at::Tensor& t);

// Collective. Every rank passes the same names in the same order. Compares bit_checksum of every
// tensor across ranks and throws, on every rank alike, naming the first tensor whose checksum
// differs from rank 0's, the ranks that differ and `step`.
void check_parameter_consistency(const Group& group, const std::vector<std::pair<std::string, at::Tensor>>& named,
                                 int64_t step);

// LMSCALE_INJECT_FAULT=diverge@<size>[:<context>] (core/fault_injection.h): after step 1, rank 1
// adds 1 to the first element of the first tensor, a silent divergence the consistency check must
// name. Does nothing on other ranks, other steps, or when the fault is not asked for. Returns
// whether it nudged.
bool inject_divergence(const Group& group, const std::vector<std::pair<std::string, at::Tensor>>& named, int64_t step,
                       const std::string& size, int64_t context);

}  // namespace lmscale::distributed
