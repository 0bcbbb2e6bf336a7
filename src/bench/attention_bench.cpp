// The attention benchmarks of attention_bench.h: one timing routine (CUDA events after warm-up on a
// GPU, the host clock on the CPU; the median, with the spread the noise guard of core/stats.h judges)
// applied to every (config, impl) cell, three grids on top of it, OOM and unsupported cells kept as
// table entries rather than crashes.
#include "bench/attention_bench.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include "core/device.h"
#include "core/error.h"
#include "core/stats.h"
#include "core/status.h"
#include "core/sweep_progress.h"
#include "core/timer.h"
#include "model/attention.h"
#include "ops/flash_attention.h"
#include "results/table.h"
#include "results/writer.h"
#ifdef LMSCALE_HAS_KERNELS
#endif

namespace lmscale {

double attention_fwd_flops(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, bool causal) {
  const double f = 4.0 * batch * heads * static_cast<double>(seq) * seq * head_dim;
  return causal ? f / 2 : f;
}

namespace {

using AttentionFn = std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, bool)>;

// Leaves exactly one SDPA backend enabled (math off, so nothing silently falls back) and restores the
// user's flags on exit; an input the backend cannot serve then raises instead of timing another kernel.
class SdpaOnly {
 public:
  explicit SdpaOnly(const std::string& backend) {
    auto& ctx = at::globalContext();
    saved_ = {ctx.userEnabledFlashSDP(), ctx.userEnabledMemEfficientSDP(), ctx.userEnabledCuDNNSDP(),
              ctx.userEnabledMathSDP()};
    ctx.setSDPUseFlash(backend == "flash");
    ctx.setSDPUseMemEfficient(backend == "mem-efficient");
    ctx.setSDPUseCuDNN(backend == "cudnn");
    ctx.setSDPUseMath(false);
  }
  ~SdpaOnly() {
    auto& ctx = at::globalContext();
    ctx.setSDPUseFlash(saved_[0]);
    ctx.setSDPUseMemEfficient(saved_[1]);
    ctx.setSDPUseCuDNN(saved_[2]);
    ctx.setSDPUseMath(saved_[3]);
  }

 private:
  std::array<bool, 4> saved_{};
};

// lmscale-hopper / lmscale-fa2: lmscale-flash with the kernel path forced (ops::set_flash_path), so the
// sm_90a kernels and the mma.sync ones can be compared in one run; lmscale-flash is the automatic choice.
// The backward runs the path of its forward (ops saves it with the autograd node).
AttentionFn forced_path_fn(const std::string& impl) {
  const std::string path = impl == "lmscale-hopper" ? "hopper" : "mma-sync";
  return [path](auto& q, auto& k, auto& v, bool c) {
    struct Restore {
      std::string saved;
      ~Restore() { ops::set_flash_path(saved); }
    } restore{ops::set_flash_path(path)};
    return ops::flash_attention(q, k, v, c);
  };
}

AttentionFn impl_fn(const std::string& impl) {
  if (impl == "lmscale-hopper" || impl == "lmscale-fa2") return forced_path_fn(impl);
  if (impl == "lmscale-flash") return [](auto& q, auto& k, auto& v, bool c) { return ops::flash_attention(q, k, v, c); };
  if (impl == "torch-naive") return [](auto& q, auto& k, auto& v, bool c) { return naive_attention(q, k, v, c); };
  const std::string backend = impl.substr(std::string("sdpa-").size());
  return [backend](auto& q, auto& k, auto& v, bool c) {
    SdpaOnly only(backend);
    return at::scaled_dot_product_attention(q, k, v, {}, 0.0, c);
  };
}

struct Config {
  int64_t batch, heads, seq, head_dim;
  std::string dtype;
  bool causal;
  std::vector<int64_t> shape() const {
    return heads > 0 ? std::vector<int64_t>{batch, heads, seq, head_dim} : std::vector<int64_t>{batch, seq, head_dim};
  }
  std::string label() const {
    return dtype + " B=" + std::to_string(batch) + (heads > 0 ? " H=" + std::to_string(heads) : "") +
           " S=" + std::to_string(seq) + " D=" + std::to_string(head_dim) + (causal ? " causal" : "");
  }
};

// One cell's outcome: medians in ms (NaN when not measured) or why there is none; the timings behind
// each median (both passes' under Note [impl order]), for its spread.
struct Cell {
  double fwd = NAN, bwd = NAN, fwdbwd = NAN;
  std::vector<double> fwd_ms, bwd_ms, fwdbwd_ms;
  double mem_before_bwd = NAN;  // bytes allocated after the forward, before backward
  std::string status = "ok";    // ok | OOM | n/a
  std::string error;
};

// The timings of the marked intervals; *median their median.
std::vector<double> timings_ms(StepClock& clock, const std::vector<std::pair<int, int>>& marks, double* median) {
  clock.synchronize();
  std::vector<double> v;
  for (auto [a, b] : marks) v.push_back(clock.ms(a, b));
  *median = summarize(v).median;
  return v;
}

// Times forward, backward (autograd::grad of dO, so nothing accumulates into .grad) and, when asked,
// forward+backward with dO = ones as o.sum().backward() would give. Warm-up runs every phase first.
Cell time_cell(const Config& cfg, const std::string& impl, const c10::Device& device, int warmup, int iters,
               bool fwdbwd_with_sum) {
  Cell cell;
  try {
    auto opts = torch::TensorOptions().device(device).dtype(parse_dtype(cfg.dtype));
    auto q = torch::randn(cfg.shape(), opts).requires_grad_(), k = torch::randn(cfg.shape(), opts).requires_grad_(),
         v = torch::randn(cfg.shape(), opts).requires_grad_();
    auto dout = torch::randn(cfg.shape(), opts);
    auto fn = impl_fn(impl);
    auto backward = [&](const at::Tensor& o, const at::Tensor& grad) {
      return torch::autograd::grad({o}, {q, k, v}, {grad});
    };
    for (int i = 0; i < warmup; ++i) backward(fn(q, k, v, cfg.causal), dout);
    synchronize(device);

    StepClock clock(device);
    std::vector<std::pair<int, int>> marks;
    {
      torch::NoGradGuard no_grad;  // forward alone: no graph, as an inference user runs it
      for (int i = 0; i < iters; ++i) {
        int a = clock.mark();
        fn(q, k, v, cfg.causal);
        marks.emplace_back(a, clock.mark());
      }
    }
    cell.fwd_ms = timings_ms(clock, marks, &cell.fwd);

    clock.clear();
    marks.clear();
    reset_peak_memory(device);
    for (int i = 0; i < iters; ++i) {
      auto o = fn(q, k, v, cfg.causal);
      if (i == 0) {
        synchronize(device);
        cell.mem_before_bwd = static_cast<double>(memory_stats(device).allocated);
      }
      int a = clock.mark();
      backward(o, dout);
      marks.emplace_back(a, clock.mark());
    }
    cell.bwd_ms = timings_ms(clock, marks, &cell.bwd);

    clock.clear();
    marks.clear();
    for (int i = 0; i < iters; ++i) {
      int a = clock.mark();
      auto o = fn(q, k, v, cfg.causal);
      if (fwdbwd_with_sum)
        torch::autograd::grad({o.sum()}, {q, k, v});
      else
        backward(o, dout);
      marks.emplace_back(a, clock.mark());
    }
    cell.fwdbwd_ms = timings_ms(clock, marks, &cell.fwdbwd);
  } catch (const std::exception& e) {
    cell.status = is_out_of_memory(e) ? "OOM" : "n/a";
    cell.error = error_message(e).substr(0, 200);
    cell.error = cell.error.substr(0, cell.error.find('\n'));
    release_cached_memory(device);
  }
  return cell;
}

// Note [impl order]. A GPU's clocks drift over a run: it heats under sustained tensor work, and on an H100
// the phase timed last ran 3-9 % slower than when timed alone (docs/flash_notes.md, "Through the product,
// v5.1"). In one pass over the impls, the later ones would pay for the earlier ones' heat. So with more
// than one impl, each config's impls are timed twice, in the given order and then reversed, and each
// phase's two medians averaged: every impl gets the mirrored place once. A pass that failed decides the cell.
Cell average_of_passes(const Cell& first, const Cell& second) {
  if (first.status != "ok") return first;
  if (second.status != "ok") return second;
  Cell c = first;
  c.fwd = (first.fwd + second.fwd) / 2;
  c.bwd = (first.bwd + second.bwd) / 2;
  c.fwdbwd = (first.fwdbwd + second.fwdbwd) / 2;
  for (auto [all, more] : {std::pair{&c.fwd_ms, &second.fwd_ms}, {&c.bwd_ms, &second.bwd_ms}, {&c.fwdbwd_ms, &second.fwdbwd_ms}})
    all->insert(all->end(), more->begin(), more->end());
  return c;
}

std::vector<Json> cell_records(const std::string& mode, const Config& cfg, const std::string& impl, const Cell& c) {
  Record base("attention", impl);
  base.update(Json{{field::mode, mode},           {field::batch, cfg.batch},     {field::heads, cfg.heads},
                   {field::context, cfg.seq},     {field::head_dim, cfg.head_dim}, {field::precision, cfg.dtype},
                   {field::causal, cfg.causal}});
  base.set_status(c.status, c.error);
  std::vector<Json> out;
  auto add = [&](const std::string& metric, double value, const std::string& unit,
                 const std::vector<double>& timings = {}) {
    if (base.status() != Status::ok) return out.push_back(base.metric(metric, nullptr, unit));
    if (!std::isnan(value) && !timings.empty()) {
      // The value stays the median; the spread beside it is what the noise guard reads (report's ⚠).
      const Summary t = summarize(timings);
      Json j = base.metric(metric, value, unit);
      j.update(Json{{field::std_dev, t.std}, {field::median, t.median}, {field::min, t.min}, {field::max, t.max},
                    {field::n, t.n}});
      return out.push_back(j);
    }
    if (!std::isnan(value)) return out.push_back(base.metric(metric, value, unit));
    Record not_measured = base;  // e.g. no backward in this mode
    out.push_back(not_measured.set_status(Status::skipped, "not measured in this mode").metric(metric, nullptr, unit));
  };
  const double flops = attention_fwd_flops(cfg.batch, std::max<int64_t>(cfg.heads, 1), cfg.seq, cfg.head_dim, cfg.causal);
  add("fwd_ms", c.fwd, "ms", c.fwd_ms);
  add("bwd_ms", c.bwd, "ms", c.bwd_ms);
  add("fwdbwd_ms", c.fwdbwd, "ms", c.fwdbwd_ms);
  add("fwd_tflops", flops / (c.fwd * 1e9), "TFLOP/s");
  add("bwd_tflops", 2.5 * flops / (c.bwd * 1e9), "TFLOP/s");
  add("fwdbwd_tflops", 3.5 * flops / (c.fwdbwd * 1e9), "TFLOP/s");
  add("mem_before_bwd", c.mem_before_bwd, "bytes");
  return out;
}

std::string cell_text(const Cell& c, double v, int decimals = 3) { return c.status == "ok" ? fmt(v, decimals) : c.status; }

// A median with ± the spread of its timings, ⚠ when the noise guard does not trust it (core/stats.h).
std::string timed_text(const Cell& c, double median, const std::vector<double>& timings) {
  if (c.status != "ok") return c.status;
  const Summary t = summarize(timings);
  return fmt(median, 3) + (t.n > 1 ? " ± " + fmt(t.std, 3) : "") + (noise_problem(t).empty() ? "" : " ⚠");
}

// Counts a cell the guard does not trust (any of its phases), keeping why.
void note_noise(const Cell& c, int* noisy, std::set<std::string>* why) {
  if (c.status != "ok") return;
  bool any = false;
  for (const auto* t : {&c.fwd_ms, &c.bwd_ms, &c.fwdbwd_ms})
    if (!t->empty())
      if (const std::string w = noise_problem(summarize(*t)); !w.empty()) {
        any = true;
        why->insert(w);
      }
  *noisy += any;
}

// The line under a table with untrusted cells: why, and the command that measures them properly.
std::string noise_note(int noisy, const std::set<std::string>& why, int iters) {
  if (noisy == 0) return "";
  std::string w;
  for (const auto& x : why) w += (w.empty() ? "" : "; ") + x;
  return "\n**⚠ " + std::to_string(noisy) + (noisy == 1 ? " cell is" : " cells are") + " not to be trusted** (" + w +
         "): its timings spread by more than " + fmt(100 * kNoisySpread, 0) + " % of the median, or rest on fewer than " +
         std::to_string(kTrustedSteps) + ". Measure again on an idle machine" +
         (iters < 4 * kTrustedSteps ? ", with at least `--iters " + std::to_string(4 * kTrustedSteps) + "`" : "") +
         ".\n";
}

// How the times were taken, as the header says it: CUDA events only where there is a GPU.
std::string timing_source(const c10::Device& device) {
  return device.is_cuda() ? "medians of CUDA-event timings" : "medians of host-clock timings on the CPU";
}

// The cell's progress line (core/sweep_progress.h: count, elapsed time, ETA), its outcome the times.
void progress(SweepProgress& bar, const Config& cfg, const std::string& impl, const Cell& c) {
  const std::string outcome = c.status == "ok" ? "fwd " + fmt(c.fwd, 3) + " ms, bwd " + fmt(c.bwd, 3) +
                                                     " ms, fwd+bwd " + fmt(c.fwdbwd, 3) + " ms"
                                               : c.status + (c.error.empty() ? "" : " (" + c.error + ")");
  bar.report("attention " + cfg.label() + " " + impl, status_from_string(c.status), outcome);
}

template <typename T>
std::vector<T> or_default(const std::vector<T>& v, std::vector<T> d) {
  return v.empty() ? d : v;
}

// Memory a plain-attention forward holds for backward, in bytes (fp32 or the dtype's size): q, k, v
// and O (B·S·D each), then scores, masked scores and softmax probabilities (B·S² each), which
// backward keeps alive; the backward's own dP and dS add two more B·S² buffers at its peak.
Json memory_accounting(const Config& cfg, int64_t elem) {
  const double bsd = static_cast<double>(cfg.batch) * std::max<int64_t>(cfg.heads, 1) * cfg.seq * cfg.head_dim * elem;
  const double bss = static_cast<double>(cfg.batch) * std::max<int64_t>(cfg.heads, 1) * cfg.seq * cfg.seq * elem;
  Record r("attention", "torch-naive");
  r.update(Json{{field::mode, "sweep"},           {field::context, cfg.seq},   {field::head_dim, cfg.head_dim},
                {field::batch, cfg.batch},        {field::precision, cfg.dtype},
                {"qkvo_bytes", 4 * bsd},          {"saved_scores_probs_bytes", (cfg.causal ? 3 : 2) * bss},
                {"backward_extra_bytes", 2 * bss}});
  Json j = r.metric("memory_accounting", 4 * bsd + (cfg.causal ? 3 : 2) * bss + 2 * bss, "bytes");
  return j;
}

void finish(const AttentionBenchOptions& opts, std::vector<Json>& records, const std::string& table) {
  append_jsonl(opts.out + "/attention.jsonl", records);
  write_text(opts.out + "/attention.md", table);
  std::cout << table;
  std::cerr << "[attention] " << records.size() << " records appended to " << opts.out << "/attention.jsonl\n";
}

std::string header(const std::string& title, const c10::Device& device) {
  const auto& r = run_info();
  return "## " + title + "\n\n" + device_name(device) + ", commit " + r.commit + ", " + r.date + "\n\n`" + r.command +
         "`\n\n";
}

void run_sweep(const AttentionBenchOptions& opts, const c10::Device& device) {
  std::vector<Config> grid;
  for (auto dt : or_default(opts.dtypes, {std::string("fp32")}))
    for (auto d : or_default(opts.head_dims, {16, 32, 64, 128}))
      for (auto s : or_default(opts.seqs, {256, 1024, 4096, 8192, 16384}))
        grid.push_back({opts.batch ? opts.batch : 8, opts.heads, s, d, dt, opts.causal});
  const int iters = opts.iters ? opts.iters : 100;
  MarkdownTable t({"dtype", "d", "seq", "fwd ms (x" + std::to_string(iters) + " median ± std)", "bwd ms",
                   "memory before backward"});
  int noisy = 0;
  std::set<std::string> noise_why;
  std::vector<Json> records;
  std::optional<Config> smallest_oom;
  SweepProgress bar(grid.size());
  for (const auto& cfg : grid) {
    auto c = time_cell(cfg, "torch-naive", device, opts.warmup, iters, false);
    progress(bar, cfg, "torch-naive", c);
    for (auto& r : cell_records("sweep", cfg, "torch-naive", c)) records.push_back(r);
    t.add_row({cfg.dtype, std::to_string(cfg.head_dim), std::to_string(cfg.seq), timed_text(c, c.fwd, c.fwd_ms),
               timed_text(c, c.bwd, c.bwd_ms), c.status == "ok" ? fmt_bytes(c.mem_before_bwd) : c.status});
    note_noise(c, &noisy, &noise_why);
    if (c.status == "OOM" && (!smallest_oom || cfg.seq * cfg.head_dim < smallest_oom->seq * smallest_oom->head_dim))
      smallest_oom = cfg;
  }
  std::string md = header("Plain attention sweep (torch-naive; " + timing_source(device) + ")", device) + t.render() +
                   noise_note(noisy, noise_why, iters);
  if (smallest_oom) {
    auto acc = memory_accounting(*smallest_oom, c10::elementSize(parse_dtype(smallest_oom->dtype)));
    records.push_back(acc);
    md += "\nMemory accounting of the smallest OOM config (" + smallest_oom->label() + "): q, k, v, O " +
          fmt_bytes(acc["qkvo_bytes"].get<double>()) + "; scores/masked scores/probabilities saved for backward " +
          fmt_bytes(acc["saved_scores_probs_bytes"].get<double>()) + "; backward's dP and dS " +
          fmt_bytes(acc["backward_extra_bytes"].get<double>()) + "; total " + fmt_bytes(acc["value"].get<double>()) +
          ". Memory grows as B·S² per saved matrix: the S² terms, not D, decide OOM.\n";
  }
  finish(opts, records, md);
}

void run_grid(const AttentionBenchOptions& opts, const c10::Device& device, bool leaderboard) {
  std::vector<Config> grid;
  if (leaderboard) {
    for (auto dt : or_default(opts.dtypes, {std::string("bf16")}))
      grid.push_back({opts.batch ? opts.batch : 1, opts.heads ? opts.heads : 16,
                      opts.seqs.empty() ? 16384 : opts.seqs[0], opts.head_dims.empty() ? 64 : opts.head_dims[0], dt,
                      true});
  } else {
    std::vector<int64_t> seqs;
    for (int64_t s = 128; s <= 65536; s *= 2) seqs.push_back(s);
    for (auto dt : or_default(opts.dtypes, {std::string("bf16"), std::string("fp32")}))
      for (auto d : or_default(opts.head_dims, {16, 32, 64, 128}))
        for (auto s : or_default(opts.seqs, seqs))
          grid.push_back({opts.batch ? opts.batch : 1, opts.heads ? opts.heads : 1, s, d, dt, opts.causal});
  }
  const auto impls = or_default(opts.impls, attention_default_impls());
  const int iters = opts.iters ? opts.iters : (leaderboard ? 50 : 20);
  MarkdownTable t({"dtype", "d", "seq", "impl", "fwd ms", "bwd ms", "fwd+bwd ms", "fwd+bwd TFLOP/s",
                   "fwd+bwd vs lmscale-flash"});
  int noisy = 0;
  std::set<std::string> noise_why;
  std::vector<Json> records;
  SweepProgress bar(grid.size() * impls.size());
  for (const auto& cfg : grid) {
    // Note [impl order]: every impl timed in the given order, then (with more than one) again in reverse.
    std::map<std::string, Cell> cells;
    for (const auto& impl : impls)
      cells[impl] = time_cell(cfg, impl, device, opts.warmup, iters, /*fwdbwd_with_sum=*/leaderboard);
    if (impls.size() > 1)
      for (auto it = impls.rbegin(); it != impls.rend(); ++it)
        cells[*it] = average_of_passes(cells[*it], time_cell(cfg, *it, device, opts.warmup, iters, leaderboard));
    for (const auto& impl : impls) {
      progress(bar, cfg, impl, cells[impl]);
      for (auto& r : cell_records(leaderboard ? "leaderboard" : "flash", cfg, impl, cells[impl])) records.push_back(r);
    }
    const double flops = attention_fwd_flops(cfg.batch, cfg.heads, cfg.seq, cfg.head_dim, cfg.causal);
    const auto ours = cells.count("lmscale-flash") ? cells["lmscale-flash"] : Cell{};
    for (const auto& impl : impls) {
      const auto& c = cells[impl];
      const double ratio = c.fwdbwd / ours.fwdbwd;  // >1: slower than lmscale-flash
      t.add_row({cfg.dtype, std::to_string(cfg.head_dim), std::to_string(cfg.seq), impl, timed_text(c, c.fwd, c.fwd_ms),
                 timed_text(c, c.bwd, c.bwd_ms), timed_text(c, c.fwdbwd, c.fwdbwd_ms),
                 cell_text(c, 3.5 * flops / (c.fwdbwd * 1e9), 1),
                 c.status == "ok" && ours.status == "ok" ? fmt(ratio, 2) + "x" : "-"});
      note_noise(c, &noisy, &noise_why);
    }
  }
  const std::string order = impls.size() > 1 ? "; impls timed in order, then reversed, and averaged" : "";
  const std::string title = std::string(leaderboard ? "FlashAttention leaderboard config (forward + o.sum() + backward; "
                                                    : "FlashAttention benchmark (causal; ") +
                            timing_source(device) + order + ")";
  finish(opts, records, header(title, device) + t.render() + noise_note(noisy, noise_why, iters));
}

}  // namespace

void run_attention_bench(const AttentionBenchOptions& opts) {
  check_output_folder(opts.out);  // before the first measurement, not after it
  const auto device = resolve_device(opts.device);
  set_run_gpu(device_name(device));
  for (const auto& impl : opts.impls)
    TORCH_CHECK(std::find(attention_impls().begin(), attention_impls().end(), impl) != attention_impls().end(),
                "bench attention: --impl ", impl, " is unknown; choose from lmscale-flash, lmscale-hopper, lmscale-fa2, "
                "sdpa-flash, sdpa-cudnn, "
                "sdpa-mem-efficient, torch-naive");
  if (opts.mode == "sweep")
    run_sweep(opts, device);
  else if (opts.mode == "flash" || opts.mode == "leaderboard")
    run_grid(opts, device, opts.mode == "leaderboard");
  else
    TORCH_CHECK(false, "bench attention: mode '", opts.mode, "' is unknown; use sweep, flash or leaderboard");
}

}  // namespace lmscale
