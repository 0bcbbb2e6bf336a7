// `lmscale train --pack` (train_app/packing.h): a row's segments start at the row and after each
// end-of-file id that is not its last token; the id comes from corpus.json, and without one --pack is
// refused with the fix; a packed run trains through the CLI, its records say so, and the PyTorch
// reference, cutting the rows itself, sees the same losses. CPU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <map>

#include "core/process.h"
#include "core/python_module.h"
#include "results/reader.h"
#include "support/expect_error.h"
#include "support/run_cli.h"
#include "support/temp_dirs.h"
#include "train_app/corpus.h"
#include "train_app/packing.h"
#include "train_app/token_file.h"

namespace lmscale {
namespace {

constexpr uint16_t E = kEndOfFile;

TEST(Packing, SegmentsStartAtTheRowAndAfterEachEndOfFileId) {
  const std::string dir = testing::temp_dir("pack-rows");
  write_token_file(dir + "/t.bin", {E, 1, 2, 3, 4, 5,    // starts on an id: its document's last token, alone
                                    1, 2, 3, 4, 5, E,    // ends on one: nothing starts after it
                                    1, E, E, 2, 3, 4,    // two in a row: the second is a document of one token
                                    1, 2, 3, 4, 5, 6,    // none: one segment
                                    9});
  const TokenFile f(dir + "/t.bin", 0);
  EXPECT_EQ(segment_offsets(f, {0, 6, 12, 18}, 6, E), (std::vector<int32_t>{0, 1, 6, 12, 14, 15, 18, 24}));
  // The window's position in the file is what counts: the same tokens read from elsewhere.
  EXPECT_EQ(segment_offsets(f, {13}, 6, E), (std::vector<int32_t>{0, 1, 2, 6}));
  EXPECT_EQ(segment_offsets(f, {18}, 6, E), (std::vector<int32_t>{0, 6}));
}

TEST(Packing, EndOfFileIdComesFromTheCorpusOrTheRunIsRefused) {
  const std::string src = testing::temp_dir("pack-src");
  for (int f = 0; f < 10; ++f) std::ofstream(src + "/m" + std::to_string(f) + ".py") << "x = " << f << "\n";
  CorpusOptions o;
  o.sources = {src};
  o.out = testing::temp_dir("pack-corpus");
  o.val_percent = 30;
  const CorpusSummary c = make_corpus(o);
  EXPECT_EQ(pack_end_of_file_id(c.train_path), kEndOfFile);
  const std::string bare = testing::temp_dir("pack-bare");
  write_token_file(bare + "/train.bin", {1, 2, 3});
  testing::expect_error([&] { pack_end_of_file_id(bare + "/train.bin"); }, "has no corpus.json beside it");
  std::ofstream(bare + "/corpus.json") << R"({"name": "x", "tokenizer": {"kind": "tokenizer.json", "end_of_file_id": null}})";
  testing::expect_error([&] { pack_end_of_file_id(bare + "/train.bin"); }, "records none (its tokenizer has no <|endoftext|>");
}

// Short files: a context of 32 holds several, so packed rows hold several documents.
std::string packed_corpus(const std::string& tag) {
  const std::string src = testing::temp_dir(tag + "-src"), corpus = testing::temp_dir(tag);
  for (int f = 0; f < 60; ++f) {
    std::ofstream out(src + "/m" + std::to_string(f) + ".py");
    for (int i = 0; i <= f % 3; ++i) out << "def f" << (i * 7 + f) % 11 << "(x):\n    return x * " << f % 5 << "\n";
  }
  EXPECT_EQ(testing::run_cli_argv({"train", "corpus", "--from", src, "--out", corpus, "--val-percent", "20"}).exit_code, 0);
  return corpus;
}

// impl → step → validation loss, from a train.jsonl.
std::map<std::string, std::map<int64_t, double>> val_losses(const std::string& out) {
  std::map<std::string, std::map<int64_t, double>> val;
  for (const auto& j : read_jsonl(out + "/train.jsonl"))
    if (j["metric"] == "val_loss") val[j["impl"].get<std::string>()][j["step"].get<int64_t>()] = j["value"].get<double>();
  return val;
}

TEST(PackCli, RefusesTokenFilesWithoutBoundaries) {
  const std::string dir = testing::temp_dir("pack-cli-bare");
  write_token_file(dir + "/a.bin", std::vector<uint16_t>(300, 7));
  const auto r = testing::run_cli_argv({"train", "--device", "cpu", "--train-file", dir + "/a.bin", "--val-file",
                                        dir + "/a.bin", "--pack", "--context", "16", "--steps", "2", "--out", dir + "/o"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--pack cuts each context after the end-of-file id"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("lmscale train corpus --out DIR"), std::string::npos) << r.output;
}

TEST(PackCli, TrainsWithAttentionWithinDocuments) {
  const std::string corpus = packed_corpus("pack-cli"), out = testing::temp_dir("pack-cli-out");
  const auto r = testing::run_cli_argv({"train", "--device", "cpu", "--corpus", corpus, "--pack", "--attention", "flash",
                                        "--context", "32", "--steps", "20", "--eval-every", "10", "--eval-batches", "2",
                                        "--lr", "3e-3", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto val = val_losses(out)["lmscale"];
  ASSERT_EQ(val.size(), 3u) << r.output;
  EXPECT_LT(val[20], val[0] - 1.0);
  for (const auto& j : read_jsonl(out + "/train.jsonl")) EXPECT_EQ(j.value("pack", false), true) << j.dump();
}

TEST(PackCli, TorchReferenceSeesTheSameMask) {
  ProcessOptions quiet;
  quiet.capture_stdout = quiet.merge_stderr = true;
  if (!run_process({python_interpreter(), "-c", "import torch"}, quiet).ok())
    GTEST_SKIP() << python_interpreter() << " cannot import torch (./lmscale test sets LMSCALE_PYTHON)";
  const std::string corpus = packed_corpus("pack-ref");
  std::map<bool, std::map<std::string, std::map<int64_t, double>>> val;
  for (const bool pack : {true, false}) {
    const std::string out = testing::temp_dir(pack ? "pack-ref-on" : "pack-ref-off");
    std::vector<std::string> args{"train", "--device", "cpu", "--corpus", corpus, "--context", "32", "--steps", "2",
                                  "--eval-every", "1", "--eval-batches", "2", "--lr", "3e-3", "--impl",
                                  "lmscale,torch-eager", "--out", out};
    if (pack) args.push_back("--pack");
    const auto r = testing::run_cli_argv(args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    val[pack] = val_losses(out);
  }
  // Same weights, batches and mask: before training (the forward's mask) and after each of two
  // updates (its gradients) the two agree to fp32 rounding.
  const auto& on = val[true];
  for (int64_t s = 0; s <= 2; ++s) {
    ASSERT_TRUE(on.at("lmscale").count(s) && on.at("torch-eager").count(s)) << s;
    EXPECT_NEAR(on.at("torch-eager").at(s), on.at("lmscale").at(s), 1e-4 * on.at("lmscale").at(s)) << "step " << s;
  }
  // And the mask is not the row's: packing changes the loss.
  EXPECT_GT(std::abs(on.at("lmscale").at(0) - val[false].at("lmscale").at(0)), 1e-3);
}

}  // namespace
}  // namespace lmscale
