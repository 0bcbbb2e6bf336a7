// Collective bandwidth benchmark; see comm_bench.h.
//
// Note [bus bandwidth]
// size S is the payload in bytes: the buffer each rank all-reduces, or the full (all ranks') buffer
// that reduce-scatter reads and all-gather writes. time t is the slowest rank's mean per
// collective. algbw = S / t. busbw = algbw · factor, the factor making busbw comparable to the
// link's peak whatever the rank count: a ring all-reduce moves 2(n-1)/n · S per rank, a
// reduce-scatter or all-gather (n-1)/n · S (nccl-tests, doc/PERFORMANCE.md). GB/s = 1e9 B/s.
#include "bench/comm_bench.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <c10/core/DeviceGuard.h>

#include <chrono>
#include <iostream>

#include "core/device.h"
#include "core/sweep_progress.h"
#include "distributed/fault.h"
#include "distributed/process_group.h"
#include "results/table.h"
#include "results/writer.h"

namespace lmscale {
namespace {

using distributed::Group;

c10::intrusive_ptr<c10d::Work> launch(const Group& g, const std::string& op, at::Tensor& in, at::Tensor& out) {
  if (op == "all_reduce") {
    std::vector<at::Tensor> t{in};
    return g.backend->allreduce(t);
  }
  if (op == "reduce_scatter") return g.backend->_reduce_scatter_base(out, in);
  return g.backend->_allgather_base(out, in);  // all_gather
}

double max_over_ranks(const Group& g, double v) { return distributed::max_over_ranks(g, {v})[0]; }

void barrier(const Group& g) { max_over_ranks(g, 0.0); }

// Mean seconds per collective on this rank: `n` back-to-back collectives, each waited for (and,
// on GPU, synchronised) so the host clock brackets exactly the device work.
double time_ops(const Group& g, const std::string& op, at::Tensor& in, at::Tensor& out, int n) {
  barrier(g);
  auto start = std::chrono::steady_clock::now();
  distributed::run_explained(g, "bench comm", op, -1, [&] {
    for (int i = 0; i < n; ++i) {
      distributed::wait(launch(g, op, in, out));
      synchronize(g.device);
    }
  });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / n;
}

}  // namespace

double bus_bandwidth_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "reduce_scatter" || op == "all_gather") return double(n - 1) / n;
  TORCH_CHECK(false, "--ops '", op, "' is not a collective; choose all_reduce, reduce_scatter, all_gather.");
  return 0;
}

std::string run_comm_bench(const CommBenchOptions& o) {
  check_output_folder(o.out);  // before the first measurement, not after it
  for (const auto& op : o.ops) bus_bandwidth_factor(op, 2);  // validate names before any rendezvous
  TORCH_CHECK(o.warmup >= 0 && o.iters >= 1, "--warmup ", o.warmup, " / --iters ", o.iters,
              " must be >= 0 / >= 1.");
  const distributed::DistEnv env = distributed::env_from_environment();
  distributed::require_several_ranks(env, "bench comm");
  const auto timeout = distributed::collective_timeout_from_env();
  auto store = distributed::connect_store(env, timeout);
  const bool lead = env.rank == 0;

  MarkdownTable table({"backend", "op", "world", "size", "time (ms)", "algbw (GB/s)", "busbw (GB/s)"});
  std::vector<Json> records;
  for (const auto& backend : o.backends) {
    Group g = distributed::make_group(distributed::parse_backend(backend), store, env, timeout, "comm");
    c10::OptionalDeviceGuard guard;
    if (g.device.is_cuda()) {
      guard.reset_device(g.device);
      if (lead) set_run_gpu(device_name(g.device));
    }
    for (const auto& op : o.ops) {
      for (double mb : o.sizes_mb) {
        const int64_t bytes = static_cast<int64_t>(mb * (1 << 20)) / 4 * 4;
        const int64_t numel = bytes / 4;
        // Reduce-scatter and all-gather need a whole number of elements per rank.
        const int64_t chunk = numel / g.world_size;
        const auto opts = at::TensorOptions().dtype(at::kFloat).device(g.device);
        at::Tensor in, out;
        if (op == "all_reduce") {
          in = at::full({numel}, 1.0f, opts);
        } else if (op == "reduce_scatter") {
          in = at::full({chunk * g.world_size}, 1.0f, opts);
          out = at::empty({chunk}, opts);
        } else {
          in = at::full({chunk}, 1.0f, opts);
          out = at::empty({chunk * g.world_size}, opts);
        }
        const int64_t payload = (op == "all_reduce" ? numel : chunk * g.world_size) * 4;
        OpenLine line(std::cerr, lead,
                      "[comm] " + backend + " " + op + " " + fmt_bytes(payload) + " x" + std::to_string(g.world_size));
        distributed::run_explained(g, "bench comm", op + " (warm-up)", -1, [&] {
          for (int i = 0; i < o.warmup; ++i) distributed::wait(launch(g, op, in, out));
        });
        synchronize(g.device);
        // One probe collective sizes the timed run so slow cells (Gloo at 1 GB) stay short.
        double probe = max_over_ranks(g, time_ops(g, op, in, out, 1));
        int n = std::max(3, std::min(o.iters, static_cast<int>(o.seconds_per_cell / std::max(probe, 1e-6))));
        double t = max_over_ranks(g, time_ops(g, op, in, out, n));
        double algbw = payload / t / 1e9, busbw = algbw * bus_bandwidth_factor(op, g.world_size);
        line.close(fmt(t * 1e3, 3) + " ms, busbw " + fmt(busbw) + " GB/s (" + std::to_string(n) + " iters)");
        table.add_row({backend, op, std::to_string(g.world_size), fmt_bytes(payload), fmt(t * 1e3, 3), fmt(algbw),
                       fmt(busbw)});
        const Json config{{field::backend, backend}, {field::op, op},           {field::world, g.world_size},
                          {field::size_bytes, payload}, {field::size_mb, mb},   {field::precision, "fp32"},
                          {field::iters, n},
                          {field::device, g.device.is_cuda() ? device_name(g.device) : "cpu"}};
        const std::string impl = "lmscale-c10d-" + backend;
        records.push_back(Record("comm", impl).update(config).metric("time_ms", t * 1e3, "ms"));
        records.push_back(Record("comm", impl).update(config).metric("algbw", algbw, "GB/s"));
        records.push_back(Record("comm", impl).update(config).metric("busbw", busbw, "GB/s"));
      }
    }
  }
  if (!lead) return "";
  append_jsonl(o.out + "/comm.jsonl", records);
  std::string md = "# bench comm\n\n`" + run_info().command + "` (" + run_info().date + ", commit " +
                   run_info().commit + ")\n\n" + table.render();
  write_text(o.out + "/comm.md", md);
  return table.render();
}

}  // namespace lmscale
