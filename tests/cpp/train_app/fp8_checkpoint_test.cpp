// Delayed FP8 scaling's state through a checkpoint (train_app/fp8_checkpoint.h). On the CPU: a model set up
// for delayed scaling (histories, cached FP8 weights; no forward runs, the state is driven by hand as
// the producers and AdamW drive it on a GPU) saves its state, a fresh one loads it in place (same
// addresses), holds the same bytes and flags, and takes its next weight refresh bit for bit like the
// original; missing or mis-shaped state fails by name. On a Hopper GPU (skipped elsewhere): a delayed-
// scaling fp8 run checkpointed and resumed takes the uninterrupted run's losses and weights exactly, and
// a checkpoint without the state is refused.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "support/fp8_step.h"
#include "support/temp_dirs.h"
#include "train_app/checkpoint.h"
#include "train_app/fp8_checkpoint.h"
#include "train_app/safetensors.h"

namespace lmscale {
namespace {

namespace fs = std::filesystem;

struct Fp8Model {
  TransformerLM model{nullptr};
  std::vector<DerivedWeights> derived;
  torch::Tensor amax;
};

// A tiny model in the state `--precision fp8 --fp8-scaling delayed` gives it on a GPU: histories for
// the operands the fused producers write (the flags alone; nothing fused runs on the CPU), bf16 copies
// and cached FP8 weights with their histories.
Fp8Model fp8_model(bool fused_gate = true) {
  ModelConfig cfg = model_config("tiny");
  cfg.d_model = 32;
  cfg.num_heads = 2;
  cfg.d_ff = 64;
  cfg.vocab_size = 64;
  cfg.context_length = 16;
  torch::manual_seed(5);
  Fp8Model m;
  m.model = TransformerLM(cfg);
  m.model->use_fused_norms(true);
  m.model->use_fused_swiglu(fused_gate);
  Fp8Layers f;
  f.min_dim = 16;
  f.scaling = Fp8Scaling::kDelayed;
  m.model->use_fp8(f);
  m.model->attach_bf16_copies();
  m.derived = m.model->attach_fp8_weights(m.amax, /*delayed=*/true);
  return m;
}

torch::Tensor amax_bits(float v) { return torch::tensor({v}).view(torch::kInt); }

// One step's worth of state changes, as the GPU step makes them: producers max an amax into every
// activation history, the roll; AdamW takes each weight's amax (and, once seeded, writes its FP8 rows
// and maxes their amax into the weight's history), the refresh.
void fake_step(Fp8Model& m, int step) {
  torch::NoGradGuard no_grad;
  auto& h = m.model->fp8_histories;
  for (int64_t r = 0; r < h.size(0); ++r) h[r][2].copy_(amax_bits(0.5f + step + 0.25f * r)[0]);
  m.model->roll_fp8_histories();
  for (size_t k = 0; k < m.derived.size(); ++k) {
    auto& d = m.derived[k];
    d.amax.copy_(amax_bits(1.0f + step + 0.5f * k));
    if (*d.seeded) {
      d.history[2].copy_(amax_bits(2.0f + step)[0]);
      for (auto& rows : d.fp8_rows) rows.view(torch::kByte).copy_(torch::randint(0, 120, rows.sizes(), torch::kByte));
    }
    d.refresh();
  }
}

torch::Tensor bytes(const torch::Tensor& t) { return t.view(torch::kByte); }

void expect_same_state(Fp8Model& a, Fp8Model& b) {
  EXPECT_TRUE(torch::equal(a.model->fp8_histories, b.model->fp8_histories));
  EXPECT_TRUE(torch::equal(a.model->fp8_weight_histories, b.model->fp8_weight_histories));
  ASSERT_EQ(a.model->fp8_cached_weights.size(), b.model->fp8_cached_weights.size());
  for (size_t k = 0; k < a.model->fp8_cached_weights.size(); ++k) {
    const auto& wa = a.model->fp8_cached_weights[k].holder->weight_fp8;
    const auto& wb = b.model->fp8_cached_weights[k].holder->weight_fp8;
    EXPECT_TRUE(torch::equal(bytes(wa.data), bytes(wb.data))) << "weight " << k;
    EXPECT_TRUE(torch::equal(bytes(wa.data_t), bytes(wb.data_t))) << "weight " << k;
    EXPECT_TRUE(torch::equal(wa.inv_scale, wb.inv_scale)) << "weight " << k;
    EXPECT_EQ(*a.model->fp8_cached_weights[k].seeded, *b.model->fp8_cached_weights[k].seeded) << "weight " << k;
  }
}

}  // namespace

TEST(Fp8Checkpoint, StateRoundTripsInPlaceAndTheNextRefreshMatches) {
  Fp8Model a = fp8_model();
  ASSERT_TRUE(has_fp8_state(a.model));
  ASSERT_TRUE(a.model->fp8_histories.defined());
  ASSERT_FALSE(a.model->fp8_cached_weights.empty());
  for (int s = 0; s < 3; ++s) fake_step(a, s);
  const std::string path = testing::temp_dir("fp8_checkpoint") + "/fp8.safetensors";
  write_safetensors(path, fp8_state_tensors(a.model));

  Fp8Model b = fp8_model();  // as a resumed run builds it: fresh histories, nothing seeded
  EXPECT_FALSE(*b.model->fp8_cached_weights.front().seeded);
  const void* histories = b.model->fp8_histories.data_ptr();
  const void* weight = b.model->fp8_cached_weights.front().holder->weight_fp8.data.data_ptr();
  load_fp8_state(read_safetensors(path), b.model, "fp8.safetensors");
  EXPECT_EQ(b.model->fp8_histories.data_ptr(), histories) << "loaded in place";
  EXPECT_EQ(b.model->fp8_cached_weights.front().holder->weight_fp8.data.data_ptr(), weight) << "loaded in place";
  expect_same_state(a, b);
  for (auto& m : b.model->modules(false)) {
    if (auto* lin = m->as<LinearImpl>()) {
      EXPECT_EQ(lin->fp8_history_seeded, lin->fp8_history_x.defined() || lin->fp8_history_dy.defined());
    }
  }

  // The refreshes the optimizer runs next treat the loaded state as the original's: same bytes after.
  torch::manual_seed(9);
  fake_step(a, 3);
  torch::manual_seed(9);
  fake_step(b, 3);
  expect_same_state(a, b);
}

TEST(Fp8Checkpoint, MissingOrMisShapedStateIsNamed) {
  Fp8Model a = fp8_model();
  fake_step(a, 0);
  SafetensorsContents saved;
  for (auto& [name, t] : fp8_state_tensors(a.model)) saved.tensors[name] = t.clone();
  SafetensorsContents missing = saved;
  missing.tensors.erase("fp8.weight_histories");
  Fp8Model b = fp8_model();
  try {
    load_fp8_state(missing, b.model, "fp8.safetensors");
    FAIL() << "loaded without fp8.weight_histories";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no tensor fp8.weight_histories"), std::string::npos) << e.what();
  }
  Fp8Model fewer = fp8_model(/*fused_gate=*/false);  // the gate writes no FP8: fewer histories
  ASSERT_TRUE(fewer.model->fp8_histories.defined());
  ASSERT_NE(fewer.model->fp8_histories.size(0), a.model->fp8_histories.size(0));
  try {
    load_fp8_state(saved, fewer.model, "fp8.safetensors");
    FAIL() << "loaded another layout's histories";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp8.histories in fp8.safetensors is Int"), std::string::npos) << e.what();
  }
}


TEST(Fp8CheckpointGpu, ResumedDelayedRunIsTheUninterruptedRun) {
  if (!testing::hopper()) GTEST_SKIP() << "needs a Hopper GPU";
  StepSetup s = testing::fp8_step_setup(torch::kFloat8_e4m3fn);
  s.fp8.scaling = Fp8Scaling::kDelayed;
  CheckpointOptions o;
  o.dir = testing::temp_dir("fp8_resume");
  o.config = Json{{"test", "fp8 resume"}};
  TrainingStep a(s);
  testing::step_losses(a, 3);  // the histories seeded and rolled, the cached weights written by AdamW
  ASSERT_TRUE(has_fp8_state(a.model()));
  const std::string path = save_checkpoint(o, a, TrainerState{3, torch::zeros({}, torch::kFloat), 0});
  const auto uninterrupted = testing::step_losses(a, 3);

  TrainingStep b(s);
  load_checkpoint(open_checkpoint(path), b);
  const auto resumed = testing::step_losses(b, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(resumed[i], uninterrupted[i]) << "step " << 4 + i;
  auto pa = a.model()->parameters(), pb = b.model()->parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i])) << "parameter " << i;

  // A checkpoint of such a run without the state (as an older lmscale wrote it) is refused by name.
  CheckpointInfo info = open_checkpoint(path);
  info.manifest["files"].erase("fp8.safetensors");
  fs::remove(fs::path(path) / "fp8.safetensors");
  TrainingStep c(s);
  try {
    load_checkpoint(info, c);
    FAIL() << "resumed without the FP8 state";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds no FP8 delayed-scaling state"), std::string::npos) << e.what();
  }
}

}  // namespace lmscale
