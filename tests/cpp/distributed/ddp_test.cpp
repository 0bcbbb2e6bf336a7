// Every DDP policy must train exactly like one process on the global batch: 2 real processes over
// Gloo, a tiny model with a tied weight, a frozen parameter and a buffer, different initial weights
// per rank (so the broadcast matters) and different batch slices per rank.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "distributed/ddp.h"
#include "distributed/dist_test_util.h"

namespace {

using namespace lmscale::distributed;
constexpr int64_t V = 13, C = 8, kGlobalBatch = 12, T = 5;  // 12: splits evenly over 2, 3, 4 and 6 ranks

struct TinyModel {
  at::Tensor emb, w1, frozen, gain, scale_buf;
  TinyModel(uint64_t seed, c10::Device dev) {
    torch::manual_seed(seed);
    emb = torch::randn({V, C}).to(dev).requires_grad_();  // also the output head (tied)
    w1 = (torch::randn({C, C}) * 0.3).to(dev).requires_grad_();
    frozen = (torch::randn({C, C}) * 0.2).to(dev);        // requires_grad = false
    gain = (torch::rand({C}) + 0.5).to(dev).requires_grad_();
    scale_buf = (torch::rand({C}) + 0.5).to(dev);
  }
  // The tied embedding is listed twice, as a module with a tied head lists it.
  std::vector<at::Tensor> params() const { return {emb, w1, frozen, gain, emb}; }
  std::vector<at::Tensor> trainable() const { return {emb, w1, gain}; }
  at::Tensor loss(const at::Tensor& tokens, const at::Tensor& targets) const {
    auto x = emb.index_select(0, tokens.flatten()).view({tokens.size(0), tokens.size(1), C});
    auto h = torch::tanh(x.matmul(w1.t())) * scale_buf;
    h = (h + h.matmul(frozen.t())) * gain;
    auto logits = h.matmul(emb.t());
    return torch::nn::functional::cross_entropy(logits.view({-1, V}), targets.flatten());
  }
};

std::vector<at::Tensor> global_batch(uint64_t seed, int step, c10::Device dev) {
  torch::manual_seed(seed * 1000 + step);
  return {torch::randint(V, {kGlobalBatch, T}).to(dev), torch::randint(V, {kGlobalBatch, T}).to(dev)};
}

// fp32, rtol 1e-6 on CPU; GPU kernels may sum the full and the sliced batch in different orders.
void expect_close(const at::Tensor& a, const at::Tensor& b, const std::string& what) {
  const bool gpu = a.is_cuda();
  auto diff = (a - b).abs().max().item<double>();
  EXPECT_TRUE(torch::allclose(a, b, gpu ? 1e-5 : 1e-6, gpu ? 1e-6 : 1e-7)) << what << ": max abs diff " << diff;
}

// One step's backward on both sides: the reference on the whole global batch, this rank on its
// slice of it, then DDP's finish (so this rank's gradients are the average over ranks).
void backward_both(const TinyModel& ref, const TinyModel& mine, DistributedDataParallel& ddp, const Group& g,
                   uint64_t seed, int step) {
  auto batch = global_batch(seed, step, g.device);
  ref.loss(batch[0], batch[1]).backward();
  const int64_t per_rank = kGlobalBatch / g.world_size, lo = g.rank * per_rank;
  mine.loss(batch[0].narrow(0, lo, per_rank), batch[1].narrow(0, lo, per_rank)).backward();
  ddp.finish_gradient_synchronization();
}

void train_and_compare(const Group& g, DdpOptions opts, size_t expected_buckets) {
  const uint64_t seed = lmscale::distributed::testing::test_seed();
  const std::string label = ddp_strategy_name(opts.strategy) + " cap " + std::to_string(opts.bucket_mb) + " MB";
  TinyModel ref(seed + 1, g.device);             // rank 0's start: the single-process reference
  TinyModel mine(seed + 1 + g.rank, g.device);   // other ranks start elsewhere until the broadcast
  DistributedDataParallel ddp(mine.params(), {mine.scale_buf}, g, opts);
  for (size_t k = 0; k < 5; ++k) {
    auto a = ref.params()[k], b = mine.params()[k];
    EXPECT_TRUE(torch::equal(a, b)) << label << ": parameter " << k << " not broadcast from rank 0";
  }
  EXPECT_TRUE(torch::equal(ref.scale_buf, mine.scale_buf)) << label << ": buffer not broadcast";
  EXPECT_EQ(ddp.bucket_assignment().size(), expected_buckets) << label;

  auto adamw = torch::optim::AdamWOptions(1e-2).weight_decay(0.01);
  torch::optim::AdamW ref_opt(ref.trainable(), adamw), opt(mine.trainable(), adamw);
  for (int step = 0; step < 5; ++step) {
    backward_both(ref, mine, ddp, g, seed, step);
    ref_opt.step();
    ref_opt.zero_grad();
    opt.step();
    // Alternate the two ways of clearing gradients: in-place views and set-to-None.
    if (step % 2 == 0) ddp.zero_grad(); else opt.zero_grad();

    const auto& st = ddp.last_step();
    ASSERT_EQ(st.launch_order.size(), expected_buckets) << label;
    for (size_t b = 0; b < st.launch_order.size(); ++b) EXPECT_EQ(st.launch_order[b], b) << label << ": out of order";
    const bool hooks = opts.strategy == DdpStrategy::Overlap || opts.strategy == DdpStrategy::Bucketed;
    EXPECT_EQ(st.launched_during_backward, hooks ? expected_buckets : 0) << label;
    for (size_t k = 0; k < 4; ++k)
      expect_close(mine.params()[k], ref.params()[k], label + ", step " + std::to_string(step) + ", param " + std::to_string(k));
  }
  EXPECT_TRUE(torch::equal(mine.frozen, ref.frozen)) << label << ": frozen parameter changed";
}

// bf16 communication: each rank's gradient is rounded to bf16 (relative error <= 2^-9), the sum of
// N of them rounds once per addition, and the average is taken in fp32. The stated tolerance per
// element is 2^-7 of the largest |gradient| of its tensor plus 2^-7 relative, for up to 4 ranks.
void bf16_gradients_match(const Group& g) {
  const uint64_t seed = lmscale::distributed::testing::test_seed();
  TinyModel ref(seed + 1, g.device), mine(seed + 1 + g.rank, g.device);
  DdpOptions opts;
  opts.comm_dtype = CommDtype::Bf16;
  opts.bucket_mb = 300.0 / (1 << 20);
  DistributedDataParallel ddp(mine.params(), {mine.scale_buf}, g, opts);
  for (int step = 0; step < 3; ++step) {
    backward_both(ref, mine, ddp, g, seed, step);
    auto r = ref.trainable(), m = mine.trainable();
    for (size_t k = 0; k < r.size(); ++k) {
      const double scale = r[k].grad().abs().max().item<double>();
      const double diff = (m[k].grad() - r[k].grad()).abs().max().item<double>();
      EXPECT_TRUE(torch::allclose(m[k].grad(), r[k].grad(), 1.0 / 128, scale / 128))
          << "bf16 comm, step " << step << ", tensor " << k << ": max diff " << diff << " (max |grad| " << scale << ")";
      EXPECT_GT(diff, 0.0) << "bf16 comm left the gradient exact: was it communicated in fp32?";
      EXPECT_EQ(m[k].grad().scalar_type(), torch::kFloat);
    }
    EXPECT_EQ(ddp.payload_bytes_per_step(), (V * C + C * C + C) * 2);
    // Take the same (reference) gradient on both sides so the next step starts equal again.
    for (size_t k = 0; k < r.size(); ++k) {
      torch::NoGradGuard no_grad;
      m[k].sub_(r[k].grad() * 0.1);
      r[k].sub_(r[k].grad() * 0.1);
      r[k].mutable_grad().reset();
    }
    ddp.zero_grad();
  }
}

// Parameters listed out of execution order (gain, w1, emb): the first step buckets them by reverse
// listing (emb, w1, gain), then the buckets are rebuilt in the order their gradients became ready
// (gain, w1, emb), and training stays equal to one process throughout.
void ready_order_rebuild(const Group& g) {
  const uint64_t seed = lmscale::distributed::testing::test_seed();
  TinyModel ref(seed + 1, g.device), mine(seed + 1 + g.rank, g.device);
  DdpOptions opts{DdpStrategy::Overlap, 0};
  DistributedDataParallel ddp({mine.gain, mine.w1, mine.emb, mine.frozen}, {mine.scale_buf}, g, opts);
  using Buckets = std::vector<std::vector<size_t>>;
  EXPECT_EQ(ddp.bucket_assignment(), (Buckets{{2}, {1}, {0}}));
  auto adamw = torch::optim::AdamWOptions(1e-2);
  torch::optim::AdamW ref_opt(ref.trainable(), adamw), opt(mine.trainable(), adamw);
  for (int step = 0; step < 3; ++step) {
    backward_both(ref, mine, ddp, g, seed, step);
    ref_opt.step();
    ref_opt.zero_grad();
    if (step == 0) {
      EXPECT_EQ(ddp.last_step().ready_order, (std::vector<size_t>{0, 1, 2}));
    }
    EXPECT_EQ(ddp.bucket_assignment(), (Buckets{{0}, {1}, {2}})) << "step " << step;
    opt.step();
    ddp.zero_grad();
    for (size_t k = 0; k < 3; ++k)
      expect_close(mine.trainable()[k], ref.trainable()[k], "ready-order rebuild, step " + std::to_string(step));
  }
}

}  // namespace

TEST(DistDdpWorker, DISABLED_MatchesSingleProcess) {
  LMSCALE_WORKER_GROUP(g);
  // Trainable tensors in backward order: gain (32 B), w1 (256 B), emb (416 B).
  train_and_compare(g, {DdpStrategy::Naive, 0}, 3);
  train_and_compare(g, {DdpStrategy::Flat, 0}, 1);
  train_and_compare(g, {DdpStrategy::Overlap, 0}, 3);
  train_and_compare(g, {DdpStrategy::Bucketed, 100.0 / (1 << 20)}, 3);  // cap below one tensor
  train_and_compare(g, {DdpStrategy::Bucketed, 300.0 / (1 << 20)}, 2);  // {gain, w1}, {emb}
  train_and_compare(g, {DdpStrategy::Bucketed, 1.0}, 1);                // larger than everything
  train_and_compare(g, {DdpStrategy::Bucketed, 1.0, 100.0 / (1 << 20)}, 2);  // small first bucket {gain}
  bf16_gradients_match(g);
  ready_order_rebuild(g);
}

TEST(DistDdp, EveryPolicyMatchesSingleProcessTraining) {
  lmscale::distributed::testing::expect_workers_pass("DistDdpWorker.DISABLED_MatchesSingleProcess", 2);
}

// Past two ranks the ring all-reduce and the averaging divide by more than 2 (the GPU runs at 4 and 8
// processes need machines not lent yet; this checks the arithmetic on Gloo meanwhile).
TEST(DistDdp, EveryPolicyMatchesSingleProcessTrainingAtFourRanks) {
  lmscale::distributed::testing::expect_workers_pass("DistDdpWorker.DISABLED_MatchesSingleProcess", 4, 180);
}

TEST(DistGpu, DdpOverNcclMatchesSingleProcessTraining) {
  LMSCALE_NEEDS_TWO_GPUS();
  lmscale::distributed::testing::expect_workers_pass_on_nccl("DistDdpWorker.DISABLED_MatchesSingleProcess");
}

TEST(DistDdpWorker, DISABLED_MismatchedParamsFailClearly) {
  LMSCALE_WORKER_GROUP(g);
  auto a = torch::zeros({4, 3}, torch::requires_grad());
  auto b = torch::zeros({g.rank == 1 ? 5 : 4}, torch::requires_grad());
  ASSERT_TRUE(g.device.is_cpu()) << "this worker runs on Gloo only";
  try {
    DistributedDataParallel ddp({a, b}, {}, g);
    ADD_FAILURE() << "shape mismatch was not detected";
  } catch (const c10::Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("rank 1 disagrees with rank 0 on parameter 1"), std::string::npos) << msg;
  }
  std::vector<at::Tensor> ps{a};
  if (g.rank == 0) ps.push_back(b);
  try {
    DistributedDataParallel ddp(ps, {}, g);
    ADD_FAILURE() << "count mismatch was not detected";
  } catch (const c10::Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("rank 0 passes 2 parameters"), std::string::npos) << msg;
  }
}

TEST(DistDdp, MismatchedParamsAcrossRanksRaiseInsteadOfHanging) {
  lmscale::distributed::testing::expect_workers_pass("DistDdpWorker.DISABLED_MismatchedParamsFailClearly", 2, 60);
}
