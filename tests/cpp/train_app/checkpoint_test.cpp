// Checkpoints on the CPU, below the CLI: SHA-256 against FIPS 180-4's vectors; the safetensors writer and
// reader round-trip names, dtypes, shapes, values and metadata, and the reader refuses a file cut short;
// AdamW's saved state makes a fresh optimizer continue bit for bit; a checkpoint of a TrainingStep loads
// into a fresh one with every weight and moment equal, and a damaged newest checkpoint is passed over.
// (The resumed run's records against an uninterrupted run's: tests/python/test_train_checkpoint.py.)
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/sha256.h"
#include "support/temp_dirs.h"
#include "train/adamw.h"
#include "train_app/checkpoint.h"
#include "train_app/safetensors.h"

namespace lmscale {
namespace {

namespace fs = std::filesystem;

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the padding needs a second block.
  const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(sha256_hex(two.data(), two.size()), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 pieces;  // fed in uneven pieces: the same digest
  for (size_t i = 0; i < two.size(); i += 5) pieces.update(two.data() + i, std::min<size_t>(5, two.size() - i));
  EXPECT_EQ(pieces.hex_digest(), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Safetensors, RoundTripsAndRefusesAFileCutShort) {
  const std::string path = testing::temp_dir("safetensors") + "/t.safetensors";
  torch::manual_seed(1);
  const NamedTensors tensors = {{"w", torch::randn({3, 5})},
                                {"half", torch::randn({4}).to(torch::kBFloat16)},
                                {"ids", torch::arange(7)},
                                {"scalar", torch::full({}, 2.5)},
                                {"empty", torch::zeros({0, 3})}};
  const int64_t bytes = write_safetensors(path, tensors, {{"format", "pt"}});
  EXPECT_EQ(bytes, static_cast<int64_t>(fs::file_size(path)));
  std::ifstream f(path, std::ios::binary);
  uint64_t header = 0;
  f.read(reinterpret_cast<char*>(&header), 8);  // little-endian host
  EXPECT_EQ(header % 8, 0u) << "the header is padded so that the data is 8-byte aligned";
  const SafetensorsContents back = read_safetensors(path);
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    const at::Tensor& b = back.tensors.at(name);
    EXPECT_EQ(b.scalar_type(), t.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(b, t)) << name;
  }
  EXPECT_EQ(back.metadata.at("format"), "pt");
  fs::resize_file(path, bytes - 3);
  try {
    read_safetensors(path);
    FAIL() << "a file cut short was read";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a whole safetensors file"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, ReferenceNames) {
  EXPECT_EQ(reference_name("token_embeddings.weight"), "emb");
  EXPECT_EQ(reference_name("layers.3.attn.q_proj.weight"), "blocks.3.attn.q.weight");
  EXPECT_EQ(reference_name("layers.0.attn.output_proj.weight"), "blocks.0.attn.o.weight");
  EXPECT_EQ(reference_name("layers.1.ffn.w2.weight"), "blocks.1.w2.weight");
  EXPECT_EQ(reference_name("layers.1.ln2.weight"), "blocks.1.ln2.weight");
  EXPECT_EQ(reference_name("ln_final.weight"), "ln.weight");
  EXPECT_EQ(reference_name("lm_head.weight"), "head.weight");
}

// Three AdamW steps on fixed gradients, the state saved after `cut` of them and loaded into a fresh
// optimizer for the rest: the weights equal those of three uninterrupted steps exactly.
TEST(Checkpoint, AdamWStateContinuesBitForBit) {
  auto run = [](int cut) {
    torch::manual_seed(0);
    at::Tensor w = torch::randn({4, 3}).requires_grad_(true);
    auto opt = std::make_unique<FusedAdamW>(std::vector<at::Tensor>{w}, AdamWOptions{}, /*use_kernel=*/false);
    for (int s = 1; s <= 3; ++s) {
      if (s == cut + 1 && cut > 0) {  // a "resumed" optimizer from the saved state
        const auto m = opt->exp_avg()[0].clone(), v = opt->exp_avg_sq()[0].clone();
        const int64_t steps = opt->step_count();
        opt = std::make_unique<FusedAdamW>(std::vector<at::Tensor>{w}, AdamWOptions{}, false);
        opt->load_state({m}, {v}, steps);
      }
      w.mutable_grad() = torch::full({4, 3}, 0.1 * s) * w.detach();
      opt->step();
    }
    EXPECT_EQ(opt->step_count(), 3);
    return w.detach().clone();
  };
  const at::Tensor whole = run(0);
  EXPECT_TRUE(torch::equal(run(1), whole));
  EXPECT_TRUE(torch::equal(run(2), whole));
}

StepSetup tiny_setup() {
  StepSetup s;
  s.model = model_config("tiny");
  s.model.context_length = 16;
  s.context = 16;
  s.batch = 2;
  return s;
}

TEST(Checkpoint, SavesLoadsAndSkipsADamagedNewest) {
  const std::string dir = testing::temp_dir("checkpoint") + "/run";
  TrainingStep a(tiny_setup());
  CheckpointOptions o;
  o.dir = dir;
  o.keep = 3;
  o.config = {{"steps", 2}};
  for (int64_t s = 1; s <= 2; ++s) {
    a.run(StepMode::TrainStep);
    save_checkpoint(o, a, {s, torch::full({}, 1.5f * s), 1});
  }
  std::ostringstream log;
  auto found = find_checkpoint(dir, o.config, log);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->step, 2);
  EXPECT_EQ(checkpoint_problem(found->path), "");

  StepSetup other = tiny_setup();
  other.seed = 9;  // other initial weights: the load must replace every one
  TrainingStep b(other);
  const TrainerState state = load_checkpoint(*found, b);
  EXPECT_EQ(state.step, 2);
  EXPECT_EQ(state.loss_sum.item<float>(), 3.0f);
  EXPECT_EQ(b.optimizer().step_count(), 2);
  const auto pa = a.model()->parameters(), pb = b.model()->parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(torch::equal(pa[i], pb[i])) << i;
    EXPECT_TRUE(torch::equal(a.optimizer().exp_avg()[i], b.optimizer().exp_avg()[i])) << i;
    EXPECT_TRUE(torch::equal(a.optimizer().exp_avg_sq()[i], b.optimizer().exp_avg_sq()[i])) << i;
  }

  {  // one byte of the newest checkpoint's weights changed: passed over, named, the one before used
    std::fstream f(found->path + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  EXPECT_NE(checkpoint_problem(found->path).find("SHA-256 differs"), std::string::npos);
  std::ostringstream log2;
  auto older = find_checkpoint(dir, o.config, log2);
  ASSERT_TRUE(older);
  EXPECT_EQ(older->step, 1);
  EXPECT_NE(log2.str().find("step-00000002 is damaged, skipped"), std::string::npos) << log2.str();
  std::ostringstream log3;  // another run's config: not taken, and said so
  EXPECT_FALSE(find_checkpoint(dir, Json{{"steps", 3}}, log3));
  EXPECT_NE(log3.str().find("is of another run (steps differ)"), std::string::npos) << log3.str();
}

}  // namespace
}  // namespace lmscale
