// The one step vocabulary of the CLI: every subcommand that runs the model (bench, profile, memory,
// bench ddp, bench zero) takes the same flags with the same spelling, the same comma-list syntax,
// the same validators and the same custom sizes, and turns them into a StepSetup in one place.
//
//   auto a = std::make_shared<StepArgs>();            // defaults of this subcommand go here
//   add_step_options(app, *a, {kSize | kContext | kPrecision, /*lists=*/kContext});
//   ... StepSetup s = to_setup(*a, first_point(*a), resolve_device(a->device));
//
// Values are checked once, by CLI11 validators at parse time (a bad value is a usage error, exit 2);
// the library's own checks (validate(StepSetup)) guard library callers and name fields, not flags.
#pragma once
#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "train/training_step.h"

namespace lmscale::cli {

// Which step flags a subcommand takes.
enum StepFlag : unsigned {
  kSize = 1u << 0,       // --size (+ --d-model --d-ff --layers --heads --vocab for --size custom)
  kContext = 1u << 1,    // --context
  kPrecision = 1u << 2,  // --precision
  kMode = 1u << 3,       // --mode
  kAttention = 1u << 4,  // --attention
  kBatch = 1u << 5,      // --batch
  kDevice = 1u << 6,     // --device
  kWarmup = 1u << 7,     // --warmup
  kSteps = 1u << 8,      // --steps
  kImpl = 1u << 9,       // --impl (choices given per subcommand)
  kFastPath = 1u << 10,  // --no-fused, --optimizer-in-backward, --optimizer-overlap, --fp8-min-dim, --fp8-scaling
  kCudaGraph = 1u << 11, // --cuda-graph / --no-cuda-graph
  kReference = 1u << 12, // --reference: the assignment's settings instead of the default step
};

struct StepOptions {
  unsigned flags = 0;
  unsigned lists = 0;               // flags that take a comma list (the others take one value)
  std::vector<std::string> impls;   // accepted --impl values
  std::string impl_help;            // what --impl selects in this subcommand
  std::vector<std::string> modes;   // accepted --mode values (empty: all three)
  std::string mode_help;            // why a subcommand accepts fewer modes
};

// Defaults are the caller's: set them before add_step_options (help prints them). An empty
// precision or attention list means "the default step" (apply_default_step fills it).
struct StepArgs {
  std::vector<std::string> size{"small"};
  int64_t d_model = 0, d_ff = 0, layers = 0, heads = 0, vocab = 10000;  // --size custom
  std::vector<int64_t> context{512};
  std::vector<std::string> precision;  // empty: the default step's
  std::vector<std::string> mode{"train-step"};
  std::vector<std::string> attention;  // empty: the default step's
  std::vector<std::string> impl;
  int64_t batch = 4;
  std::string device = "auto";
  int64_t warmup = 5, steps = 10;
  bool fused = true;                 // StepSetup::fused
  bool optimizer_in_backward = false;  // StepSetup::optimizer_in_backward
  std::optional<bool> optimizer_overlap;  // unset: StepSetup's default (optimizer_overlap_default)
  std::optional<int64_t> fp8_min_dim;     // unset: Fp8Layers' default (kFp8MinDim)
  std::optional<std::string> fp8_scaling;  // "delayed" or "dynamic"; unset: Fp8Layers' default (kFp8ScalingDefault)
  std::optional<bool> cuda_graph;    // unset: the library's default (E2EConfig::cuda_graph)
  bool reference = false;            // --reference
};

void add_step_options(CLI::App& app, StepArgs& a, const StepOptions& which);

// Note [one default step]: every subcommand that runs the model (bench, profile, memory, bench ddp,
// bench zero, train) runs the same step unless told otherwise, so what is profiled is what is benchmarked.
// Called once the command line is parsed; fills only what it left unset:
//   size, context (lists a subcommand cleared to mean "by device": bench, train): small, 512 on a
//                GPU; tiny, 128 on the CPU;
//   GPU:         bf16 autocast, flash attention, fused kernels (and, where the subcommand replays
//                the step, one CUDA graph): the fastest correct path, the README's headline;
//   CPU:         fp32, naive attention (CPU autocast and the CPU flash reference only add time);
//   --reference: the assignment's settings (docs/spec.md §1, §2): fp32, naive attention, no fused
//                kernels, no CUDA graph, as a plain PyTorch model runs it.
// Throws a usage error for --cuda-graph without a GPU.
void apply_default_step(StepArgs& a, bool gpu);
// The --help line that states the default step (the same words in every subcommand).
extern const char* const kDefaultStepHelp;

// The model of one --size value: a named size, or "custom" built from --d-model/--d-ff/--layers/
// --heads/--vocab (a usage error naming the missing flags when they are absent).
ModelConfig model_for(const StepArgs& a, const std::string& size);
std::vector<ModelConfig> models(const StepArgs& a);

// One point of the grid the lists span.
struct StepPoint {
  std::string size;
  int64_t context = 0;
  std::string precision;
  std::string attention;
};
StepPoint first_point(const StepArgs& a);

// The StepSetup of one point: model (with attention and a context length that covers `context`),
// batch, precision, device, seed and the fast-path switches. The one place flags become a setup.
StepSetup to_setup(const StepArgs& a, const StepPoint& p, c10::Device device);

// A benchmark's options carry the step as a StepSetup (`step`) with its own counts and implementations
// (`warmup`, `steps`, `impls`): bench ddp, bench zero. Before the flags are added, the flags' defaults
// from those options (help prints them); once parsed, the flags back into them, the step through
// to_setup, so a new step flag changes step_args only. Precision and device stay with the harness
// (a precision list runs one setup per value; each rank sets its own device).
// The step flags bench ddp and bench zero take: no --device (each rank has its own), no fast-path
// or CUDA-graph switches (the designs are compared on the default step).
constexpr unsigned kDistributedStepFlags =
    kSize | kContext | kPrecision | kMode | kAttention | kImpl | kBatch | kWarmup | kSteps | kReference;
// Precision stays empty: the default step's (apply_default_step), fp32 with --reference.
template <class BenchOptions>
StepArgs step_defaults_from(const BenchOptions& o) {
  StepArgs a;
  a.size = {o.step.model.name};
  a.context = {o.step.context};
  a.batch = o.step.batch;
  a.impl = o.impls;
  a.warmup = o.warmup;
  a.steps = o.steps;
  return a;
}
template <class BenchOptions>
void set_step_options(const StepArgs& a, BenchOptions& o) {
  o.step = to_setup(a, first_point(a), o.step.device);
  o.impls = a.impl;
  o.warmup = static_cast<int>(a.warmup);
  o.steps = static_cast<int>(a.steps);
}
// Whether the ranks of a distributed benchmark run on GPUs: with NCCL, which `auto` picks when there
// are GPUs; on the CPU with Gloo.
bool ranks_use_gpus(const std::string& backend);
// Once a distributed benchmark's command line is parsed: the default step where its ranks run, then
// the flags into its options.
template <class BenchOptions>
void set_distributed_step(StepArgs& a, BenchOptions& o) {
  apply_default_step(a, ranks_use_gpus(o.backend));
  set_step_options(a, o);
}
// The help footer of bench ddp and bench zero: the default step, the example, the collective timeout.
std::string distributed_bench_footer(const std::string& example);

// A CLI11 validator accepting one of `choices` (what = "size", "precision", ...), suggesting the
// nearest on a typo.
CLI::Validator one_of(const std::string& what, std::vector<std::string> choices);
// A number >= min ("must be at least 1, got 0"); CLI11's Range prints the limits of a double.
CLI::Validator at_least(double min);
// A whole number >= min; anything else (empty, "abc", "1.5") is refused naming the allowed form.
CLI::Validator whole_at_least(int64_t min);
// A whole number in [min, max] ("--steps must be a whole number from 1 to 10000000, got ..."): for
// flags whose huge values would only fail later (memory, a wrapped seed, a port that does not exist).
CLI::Validator whole_in(int64_t min, int64_t max);
// auto, cpu, cuda or cuda:N.
CLI::Validator device_spec();

}  // namespace lmscale::cli
