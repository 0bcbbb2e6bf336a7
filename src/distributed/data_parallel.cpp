// The data-parallel designs over the fused step; see data_parallel.h.
#include "distributed/data_parallel.h"

#include <algorithm>

#include "distributed/distributed_optimizer.h"

namespace lmscale::distributed {

namespace {

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// One GPU's step: the optimizer of the TrainingStep itself.
class SingleStep : public DataParallelStep {
 public:
  explicit SingleStep(TrainingStep& ts) : ts_(ts) {}
  std::string name() const override { return "single"; }
  void synchronize() override {}
  void step() override { ts_.optimizer().step(); }
  void zero_grad() override { ts_.optimizer().zero_grad(); }
  void set_lr(double lr) override { ts_.optimizer().set_lr(lr); }
  int64_t state_bytes() const override { return ts_.optimizer().state_bytes(); }
  // The full-size gradients every step materialises (fp32, one per trainable parameter).
  int64_t grad_bytes() const override {
    int64_t bytes = 0;
    for (const auto& p : ts_.model()->parameters())
      if (p.requires_grad()) bytes += p.numel() * p.element_size();
    return bytes;
  }
  int64_t payload_bytes_per_step() const override { return 0; }
  int64_t buckets() const override { return 0; }

 protected:
  TrainingStep& ts_;
};

// DDP's policies: gradients all-reduced into .grad views of the buckets, every rank runs the full
// AdamW. The broadcast at construction writes every parameter, so the bf16 copies are refreshed.
class AllReduceStep : public SingleStep {
 public:
  AllReduceStep(TrainingStep& ts, const Group& g, DdpOptions o, std::string name)
      : SingleStep(ts), name_(std::move(name)) {
    ddp_ = std::make_unique<DistributedDataParallel>(ts.model()->parameters(), ts.model()->buffers(), g, o);
    ts.resync_weight_copies();
  }
  ~AllReduceStep() override {
    ts_.optimizer().zero_grad();  // drop the .grad views so the buckets can go
  }
  std::string name() const override { return name_; }
  void synchronize() override { ddp_->finish_gradient_synchronization(); }
  void zero_grad() override { ddp_->zero_grad(); }
  int64_t payload_bytes_per_step() const override { return ddp_->payload_bytes_per_step(); }
  int64_t buckets() const override { return static_cast<int64_t>(ddp_->bucket_assignment().size()); }

 private:
  std::string name_;
  std::unique_ptr<DistributedDataParallel> ddp_;
};

// The distributed optimizer on the step: the Linear GEMMs write into its buckets, the forward waits
// stage by stage for the all-gathers of the parameters it reads.
class ShardedStep : public DataParallelStep {
 public:
  ShardedStep(TrainingStep& ts, const Group& g, DistributedOptimizerOptions o) : ts_(ts) {
    TORCH_CHECK(!ts.is_fp8(), "zero1 / zero2 do not run --precision fp8 yet (the FP8 weights are derived per "
                "parameter, not per shard): use bf16, or the all-reduce designs (bucketed) for fp8.");
    auto& model = *ts.model();
    o.adamw = ts.setup().adamw;
    o.use_kernel = ts.setup().fused && ts.setup().parts.adamw_kernel;
    opt_ = std::make_unique<DistributedOptimizer>(model.parameters(), ts.bf16_copies(), model.buffers(), g, o);
    stages_.push_back(model.token_embeddings->parameters());
    for (const auto& layer : *model.layers) stages_.push_back(layer->parameters());
    stages_.push_back(model.ln_final->parameters());
    for (const auto& p : model.lm_head->parameters()) stages_.back().push_back(p);
    model.set_weight_grad_destination(opt_.get());
    model.before_stage = [this](int64_t stage) { opt_->wait_for(stages_.at(static_cast<size_t>(stage))); };
  }
  ~ShardedStep() override {
    ts_.model()->set_weight_grad_destination(nullptr);
    ts_.model()->before_stage = nullptr;
    opt_->wait_for_all();
  }
  std::string name() const override { return shard_layout_name(opt_->options().layout); }
  void synchronize() override { opt_->finish_gradient_synchronization(); }
  void step() override { opt_->step(); }
  void zero_grad() override { opt_->zero_grad(); }
  void wait_for_parameters() override { opt_->wait_for_all(); }
  void set_lr(double lr) override { opt_->set_lr(lr); }
  int64_t state_bytes() const override { return opt_->state_bytes(); }
  int64_t grad_bytes() const override { return opt_->grad_bytes(); }
  int64_t payload_bytes_per_step() const override { return opt_->payload_bytes_per_step(); }
  int64_t buckets() const override { return static_cast<int64_t>(opt_->bucket_assignment().size()); }

 private:
  TrainingStep& ts_;
  std::unique_ptr<DistributedOptimizer> opt_;
  std::vector<std::vector<at::Tensor>> stages_;  // what TransformerLM::before_stage(i) reads
};

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> forward_weights(TrainingStep& step) {
  std::vector<std::pair<std::string, at::Tensor>> named;
  const auto& copies = step.bf16_copies();
  size_t i = 0;
  for (const auto& item : step.model()->named_parameters()) {
    if (i < copies.size() && copies[i].defined()) named.emplace_back(item.key() + " (bf16 copy)", copies[i]);
    else named.emplace_back(item.key(), item.value());
    ++i;
  }
  return named;
}

const std::vector<std::string>& data_parallel_designs() {
  static const std::vector<std::string> names{"single", "naive", "flat", "overlap", "bucketed", "zero1", "zero2"};
  return names;
}

void check_data_parallel_design(const std::string& design) {
  const auto& names = data_parallel_designs();
  TORCH_CHECK(std::find(names.begin(), names.end(), design) != names.end(), "data-parallel design '", design,
              "' is not one of: ", join(names));
}

std::unique_ptr<DataParallelStep> make_data_parallel(const std::string& design, TrainingStep& step, const Group& group,
                                                     const DataParallelOptions& options) {
  check_data_parallel_design(design);
  if (design == "single") return std::make_unique<SingleStep>(step);
  if (design == "zero1" || design == "zero2") {
    DistributedOptimizerOptions o;
    o.layout = parse_shard_layout(design);
    o.bucket_mb = options.bucket_mb;
    o.first_bucket_mb = options.first_bucket_mb;
    o.comm_dtype = options.comm_dtype;
    return std::make_unique<ShardedStep>(step, group, o);
  }
  DdpOptions o;
  o.strategy = parse_ddp_strategy(design);
  o.bucket_mb = options.bucket_mb;
  o.first_bucket_mb = options.first_bucket_mb;
  o.comm_dtype = options.comm_dtype;
  return std::make_unique<AllReduceStep>(step, group, o, design);
}

}  // namespace lmscale::distributed
