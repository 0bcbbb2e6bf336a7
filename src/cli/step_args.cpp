// The step vocabulary (see step_args.h): one spelling, one validator and one conversion per flag.
#include "cli/step_args.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <sstream>

#include <torch/cuda.h>

#include "cli/usage.h"
#include "core/device.h"

namespace lmscale::cli {

namespace {

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::vector<std::string> known_sizes() {
  std::vector<std::string> s{"tiny"};
  for (const auto& n : size_names()) s.push_back(n);
  s.push_back("custom");
  return s;
}

template <typename V>
V unique_in_order(const V& values) {
  V out;
  for (const auto& x : values)
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  return out;
}

// Lists take "a,b,c"; single values reject a comma with a hint rather than "not a size".
// CLI11 collects every occurrence of a repeated list flag (`--mode a --mode a,b`); a value named
// twice is still one configuration, measured once.
template <typename T>
CLI::Option* add_value(CLI::App& app, const std::string& name, T& target, const std::string& help, bool list) {
  if (list) {
    CLI::Option* o = app.add_option_function<T>(
        name, [&target](const T& values) { target = unique_in_order(values); }, help + " (comma list)");
    o->delimiter(',');
    return o;
  }
  CLI::Option* o = app.add_option(name, target, help);
  o->expected(1);
  o->check(CLI::Validator(
      [](const std::string& v) -> std::string {
        return v.find(',') == std::string::npos ? "" : "takes one value here, not a list ('" + v + "')";
      },
      "", "single"));
  return o;
}

void set_default(CLI::Option* o, const std::string& value) {
  if (!value.empty()) o->default_str(value);
}

template <typename T>
std::string joined(const std::vector<T>& v) {
  std::ostringstream s;
  for (size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
  return s.str();
}

}  // namespace

CLI::Validator one_of(const std::string& what, std::vector<std::string> choices) {
  return CLI::Validator(
      [what, choices](const std::string& v) -> std::string {
        if (std::find(choices.begin(), choices.end(), v) != choices.end()) return "";
        const std::string near = nearest(v, choices);
        return "'" + v + "' is not " + (std::string("aeiou").find(what[0]) != std::string::npos ? "an " : "a ") + what + (near.empty() ? "" : ": did you mean '" + near + "'?") +
               " (one of " + join(choices) + ")";
      },
      "{" + join(choices, ",") + "}", what);
}

CLI::Validator at_least(double min) {
  return CLI::Validator(
      [min](const std::string& v) -> std::string {
        std::ostringstream lowest;
        lowest << min;
        try {
          size_t used = 0;
          const double x = std::stod(v, &used);
          // inf passes `x >= min` and NaN fails it with a misleading "at least": both refused by name,
          // since neither is a value a run can use or a record can carry.
          if (used == v.size() && !std::isfinite(x)) return "'" + v + "' is not a finite number: use a number >= " + lowest.str();
          if (used == v.size() && x >= min) return "";
          if (used == v.size()) return "must be at least " + lowest.str() + ", got " + v;
        } catch (const std::exception&) {
        }
        return (v.empty() ? "the value is empty" : "'" + v + "' is not a number") + ": use a number >= " + lowest.str();
      },
      "", "at_least");
}

CLI::Validator whole_at_least(int64_t min) {
  return CLI::Validator(
      [min](const std::string& v) -> std::string {
        const std::string form = "a whole number >= " + std::to_string(min) + " (a comma list where the flag takes "
                                 "several, e.g. 128,256)";
        try {
          size_t used = 0;
          const long long x = std::stoll(v, &used);
          if (used == v.size() && x >= min) return "";
          if (used == v.size()) return "must be at least " + std::to_string(min) + ", got " + v;
        } catch (const std::out_of_range&) {
          return "'" + v + "' is out of range: use " + form;
        } catch (const std::exception&) {
        }
        return v.empty() ? "the value is empty: use " + form : "'" + v + "' is not " + form;
      },
      "", "whole_at_least");
}

CLI::Validator whole_in(int64_t min, int64_t max) {
  return CLI::Validator(
      [min, max](const std::string& v) -> std::string {
        const std::string form = "a whole number from " + std::to_string(min) + " to " + std::to_string(max);
        try {
          size_t used = 0;
          const long long x = std::stoll(v, &used);
          if (used == v.size() && x >= min && x <= max) return "";
          if (used == v.size()) return "must be " + form + ", got " + v;
        } catch (const std::out_of_range&) {
          return "must be " + form + ", got " + v;
        } catch (const std::exception&) {
        }
        return v.empty() ? "the value is empty: use " + form : "'" + v + "' is not " + form;
      },
      "INT", "whole_in");
}

CLI::Validator device_spec() {
  return CLI::Validator(
      [](const std::string& v) -> std::string {
        if (v == "auto" || v == "cpu" || v == "cuda") return "";
        if (v.rfind("cuda:", 0) == 0 && v.size() > 5 && v.find_first_not_of("0123456789", 5) == std::string::npos)
          return "";
        return "'" + v + "' is not a device: use auto (the GPU when there is one), cpu, cuda or cuda:N (N a GPU index)";
      },
      "", "device");
}

void add_step_options(CLI::App& app, StepArgs& a, const StepOptions& w) {
  const auto has = [&](StepFlag f) { return (w.flags & f) != 0; };
  const auto list = [&](StepFlag f) { return (w.lists & f) != 0; };
  // Type names say what a value is; bare INT for counts.
  if (has(kSize)) {
    auto* o = add_value(app, "--size", a.size, "model size; custom takes --d-model --d-ff --layers --heads", list(kSize));
    o->check(one_of("size", known_sizes()))->type_name("SIZE");
    set_default(o, joined(a.size));
    auto custom = [&](const char* flag, int64_t& v, const char* help) {
      app.add_option(flag, v, std::string("--size custom: ") + help)->check(at_least(1))->group("Custom size");
    };
    custom("--d-model", a.d_model, "model width");
    custom("--d-ff", a.d_ff, "feed-forward width");
    custom("--layers", a.layers, "number of blocks");
    custom("--heads", a.heads, "attention heads (must divide --d-model)");
    custom("--vocab", a.vocab, "vocabulary (default 10000)");
  }
  if (has(kContext)) {
    auto* o = add_value(app, "--context", a.context, "sequence length T", list(kContext));
    o->check(whole_at_least(1))->type_name("INT");
    set_default(o, joined(a.context));
  }
  if (has(kPrecision)) {
    auto* o = add_value(app, "--precision", a.precision, "fp32, or bf16/fp16 autocast with fp32 weights, or fp8: bf16 autocast with the large "
                        "Linear layers' GEMMs in FP8 (Hopper GPUs; the LM head and layers under 1024 wide stay "
                        "bf16: docs/training_step_notes.md)",
                        list(kPrecision));
    o->check(one_of("precision", {"fp32", "bf16", "fp16", "fp8"}))->type_name("PRECISION");
    set_default(o, joined(a.precision));
  }
  if (has(kMode)) {
    auto* o = add_value(app, "--mode", a.mode, w.mode_help.empty() ? "what one step runs" : w.mode_help, list(kMode));
    const std::vector<std::string> all{"forward", "forward-backward", "train-step"};
    o->check(one_of("mode", w.modes.empty() ? all : w.modes))->type_name("MODE");
    set_default(o, joined(a.mode));
  }
  if (has(kAttention)) {
    auto* o = add_value(app, "--attention", a.attention, "attention backend", list(kAttention));
    o->check(one_of("attention backend", {"naive", "sdpa", "flash"}))->type_name("ATTENTION");
    set_default(o, joined(a.attention));
  }
  if (has(kImpl)) {
    auto* o = add_value(app, "--impl", a.impl, w.impl_help.empty() ? "implementations" : w.impl_help, list(kImpl));
    o->check(one_of("implementation", w.impls))->type_name("IMPL");
    set_default(o, joined(a.impl));
  }
  if (has(kBatch))
    app.add_option("--batch", a.batch, "batch size B (per rank in distributed runs)")
        ->check(whole_at_least(1))->capture_default_str();
  if (has(kDevice))
    app.add_option("--device", a.device, "auto (the GPU when there is one), cpu, cuda or cuda:N")
        ->check(device_spec())->capture_default_str();
  if (has(kWarmup))
    app.add_option("--warmup", a.warmup, "untimed steps first")->check(whole_at_least(0))->capture_default_str();
  if (has(kSteps))
    app.add_option("--steps", a.steps, "measured steps")->check(whole_at_least(1))->capture_default_str();
  if (has(kFastPath)) {
    app.add_flag_callback("--no-fused", [&a] { a.fused = false; },
                          "unfused reference path (ablation): no fused CUDA kernels");
    app.add_flag("--optimizer-in-backward", a.optimizer_in_backward,
                 "run AdamW per parameter as soon as its gradient is final");
    app.add_flag_callback("--optimizer-overlap", [&a] { a.optimizer_overlap = true; },
                          "run AdamW on a second CUDA stream under the backward, bucket by bucket (the default "
                          "for fp8, where it made xl 1.03x faster on an H100; off by default for bf16, fp16 and "
                          "fp32, where it was level or slower: docs/training_step_notes.md)");
    app.add_flag_callback("--no-optimizer-overlap", [&a] { a.optimizer_overlap = false; },
                          "run AdamW after the backward");
    app.add_option("--fp8-min-dim", a.fp8_min_dim,
                   "with --precision fp8: a Linear layer whose smaller side is under this stays bf16 (default " +
                       std::to_string(kFp8MinDim) + ", where FP8 stops paying for its casts; 0 puts every layer but "
                       "the LM head in FP8, e.g. to test FP8 numerics on a small model)")
        ->check(whole_at_least(0))->type_name("INT");
    app.add_option("--fp8-scaling", a.fp8_scaling,
                   std::string("with --precision fp8: how operands get their per-tensor scale. dynamic: from this "
                               "step's amax, a cast pass after the kernel that writes each operand. delayed: from "
                               "the largest amax of the last 16 steps, so RMSNorm, the SwiGLU gate (forward and backward) "
                               "and RoPE's backward write their FP8 operands themselves with no cast pass, and AdamW "
                               "writes the FP8 weights (an operand that grew past its scale saturates for a step; the "
                               "first step runs dynamic); the attention output and the residual stream's gradients "
                               "stay dynamic. Default ") +
                       fp8_scaling_name(kFp8ScalingDefault) + " (faster on an H100: docs/training_step_notes.md)")
        ->check(one_of("fp8 scaling", {"delayed", "dynamic"}))->type_name("SCALING");
  }
  if (has(kReference))
    app.add_flag("--reference", a.reference,
                 "the assignment's settings instead of the default step: fp32, naive attention, no fused kernels, "
                 "no CUDA graph (flags given beside it still win)");
  if (has(kCudaGraph)) {
    app.add_flag_callback("--cuda-graph", [&a] { a.cuda_graph = true; },
                          "capture the whole step as one CUDA graph and replay it (default on CUDA)");
    app.add_flag_callback("--no-cuda-graph", [&a] { a.cuda_graph = false; }, "run the step eagerly");
  }
}

const char* const kDefaultStepHelp =
    "The default step (the same in bench, profile, memory, bench ddp, bench zero): bf16 autocast, flash attention "
    "and fused kernels on a GPU, fp32 and naive attention on the CPU; --reference gives the assignment's settings "
    "(fp32, naive attention, unfused, eager).";

void apply_default_step(StepArgs& a, bool gpu) {
  if (a.size.empty()) a.size = {gpu ? "small" : "tiny"};
  if (a.context.empty()) a.context = {gpu ? 512 : 128};
  const bool fast = gpu && !a.reference;
  if (a.precision.empty()) a.precision = {fast ? "bf16" : "fp32"};
  if (a.attention.empty()) a.attention = {fast ? "flash" : "naive"};
  if (a.reference) {
    a.fused = false;
    if (!a.cuda_graph) a.cuda_graph = false;
  }
  if (a.fp8_scaling && std::find(a.precision.begin(), a.precision.end(), "fp8") == a.precision.end())
    throw CLI::ValidationError("--fp8-scaling", "applies to --precision fp8 only (given: " + join(a.precision) +
                                                    "): add fp8 to --precision or drop --fp8-scaling");
  if (a.cuda_graph.value_or(false) && !gpu)
    throw CLI::ValidationError("--cuda-graph", "captures CUDA work and needs a GPU: drop it or use --device cuda");
}

bool ranks_use_gpus(const std::string& backend) { return backend != "gloo" && torch::cuda::is_available(); }

std::string distributed_bench_footer(const std::string& example) {
  return std::string(kDefaultStepHelp) + "\nExample (two ranks on this machine):\n  " + example +
         "\nA collective that does not finish within LMSCALE_DIST_TIMEOUT_S seconds (default 300) stops the run, "
         "naming the rank, collective, step and missing ranks.";
}

ModelConfig model_for(const StepArgs& a, const std::string& size) {
  if (size != "custom") {
    if (a.d_model || a.d_ff || a.layers || a.heads)
      std::cerr << "lmscale: note: --d-model/--d-ff/--layers/--heads apply to --size custom only; using " << size
                << "\n";
    return model_config(size);
  }
  std::vector<std::string> missing;
  if (!a.d_model) missing.push_back("--d-model");
  if (!a.d_ff) missing.push_back("--d-ff");
  if (!a.layers) missing.push_back("--layers");
  if (!a.heads) missing.push_back("--heads");
  if (!missing.empty())
    throw CLI::ValidationError("--size custom", "needs " + join(missing) +
                                                    " (e.g. --size custom --d-model 512 --d-ff 2048 --layers 8 --heads 8)");
  if (a.d_model % a.heads != 0)
    throw CLI::ValidationError("--heads", std::to_string(a.heads) + " does not divide --d-model " +
                                              std::to_string(a.d_model));
  ModelConfig c;
  c.name = "custom";
  c.vocab_size = a.vocab;
  c.d_model = a.d_model;
  c.d_ff = a.d_ff;
  c.num_layers = a.layers;
  c.num_heads = a.heads;
  return c;
}

std::vector<ModelConfig> models(const StepArgs& a) {
  std::vector<ModelConfig> m;
  for (const auto& s : a.size) m.push_back(model_for(a, s));
  return m;
}

StepPoint first_point(const StepArgs& a) {
  StepPoint p;
  p.size = a.size.empty() ? "small" : a.size.front();
  p.context = a.context.empty() ? 512 : a.context.front();
  p.precision = a.precision.empty() ? "fp32" : a.precision.front();
  p.attention = a.attention.empty() ? "naive" : a.attention.front();
  return p;
}

StepSetup to_setup(const StepArgs& a, const StepPoint& p, c10::Device device) {
  StepSetup s;
  s.model = model_for(a, p.size);
  s.model.attention = parse_attention_backend(p.attention);
  s.model.context_length = std::max(s.model.context_length, p.context);
  s.context = p.context;
  s.batch = a.batch;
  s.precision = parse_dtype(p.precision);
  s.device = device;
  s.fused = a.fused;
  s.optimizer_in_backward = a.optimizer_in_backward;
  if (a.optimizer_overlap) s.optimizer_overlap = *a.optimizer_overlap;
  if (a.fp8_min_dim) s.fp8.min_dim = *a.fp8_min_dim;
  if (a.fp8_scaling) s.fp8.scaling = parse_fp8_scaling(*a.fp8_scaling);
  return s;
}

}  // namespace lmscale::cli
