// Token files (uint16 ids) and the data order: the reader's edge cases each fail with a message that
// names the problem; the windows of a run depend on the seed and step alone and always fit the file.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "core/interrupt.h"
#include "support/temp_dirs.h"
#include "train_app/data_order.h"
#include "train_app/token_file.h"

namespace lmscale {
namespace {

std::string write_bytes(const std::string& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// The message of the error that opening `path` throws ("" when none).
std::string open_error(const std::string& path, int64_t vocab) {
  try {
    TokenFile f(path, vocab);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(TokenFile, ReadsWhatWasWritten) {
  const std::string dir = testing::temp_dir("tokens");
  const std::vector<uint16_t> ids{0, 1, 255, 256, 65535, 7};
  write_token_file(dir + "/t.bin", ids);
  TokenFile f(dir + "/t.bin", 65536);
  ASSERT_EQ(f.size(), 6);
  for (int64_t i = 0; i < f.size(); ++i) EXPECT_EQ(f[i], ids[i]);
  EXPECT_EQ(f.max_id(), 65535);
  // Little-endian on disk, the convention numpy's uint16 memmap reads.
  EXPECT_EQ(testing::read_text(dir + "/t.bin").substr(0, 4), std::string("\x00\x00\x01\x00", 4));
}

TEST(TokenFile, EdgeCasesFailWithTheirCause) {
  const std::string dir = testing::temp_dir("tokens-bad");
  const std::string odd = open_error(write_bytes(dir, "odd.bin", std::string("\x01\x00\x02", 3)), 512);
  EXPECT_NE(odd.find("3 bytes, an odd count"), std::string::npos) << odd;
  const std::string empty = open_error(write_bytes(dir, "empty.bin", ""), 512);
  EXPECT_NE(empty.find("is empty"), std::string::npos) << empty;
  const std::string missing = open_error(dir + "/none.bin", 512);
  EXPECT_NE(missing.find("cannot open"), std::string::npos) << missing;
  EXPECT_NE(missing.find("lmscale train corpus"), std::string::npos) << missing;
  EXPECT_NE(open_error(dir, 512).find("not a regular file"), std::string::npos);
  // Token 2 is id 600 ≥ 512: named with its position, the vocabulary and the fix.
  write_token_file(dir + "/big.bin", {1, 2, 600, 3, 700});
  const std::string beyond = open_error(dir + "/big.bin", 512);
  EXPECT_NE(beyond.find("token 2 is id 600"), std::string::npos) << beyond;
  EXPECT_NE(beyond.find("vocabulary has 512 ids"), std::string::npos) << beyond;
  EXPECT_NE(beyond.find("--vocab 701"), std::string::npos) << beyond;
  EXPECT_EQ(open_error(dir + "/big.bin", 701), "");  // every id fits
  EXPECT_EQ(open_error(dir + "/big.bin", 0), "");    // vocab 0: no check
}

// A token file cut shorter by another program while it is mapped: the next read past its new end is
// a SIGBUS, which ends the process with a message naming the file (exit 1), not a bare signal.
TEST(TokenFileDeathTest, TruncatedWhileMappedIsNamed) {
  const std::string dir = testing::temp_dir("tokens-cut");
  const std::string path = dir + "/train.bin";
  write_token_file(path, std::vector<uint16_t>(100000, 7));
  EXPECT_EXIT(
      {
        install_interrupt_handlers();
        TokenFile f(path, 512);
        EXPECT_EQ(::truncate(path.c_str(), 4096), 0);
        volatile uint16_t last = f[f.size() - 1];
        (void)last;
        std::exit(0);
      },
      ::testing::ExitedWithCode(1), "token file .*train.bin changed while training");
  // The hash of the ids: the same ids give the same hash, another id another one.
  write_token_file(dir + "/a.bin", {1, 2, 3});
  write_token_file(dir + "/b.bin", {1, 2, 4});
  EXPECT_EQ(TokenFile(dir + "/a.bin", 0).content_hash(), hash_ids(std::vector<uint16_t>{1, 2, 3}.data(), 3));
  EXPECT_NE(TokenFile(dir + "/a.bin", 0).content_hash(), TokenFile(dir + "/b.bin", 0).content_hash());
}

TEST(DataOrder, TrainWindowsFitAndDependOnSeedAndStepOnly) {
  const int64_t n = 1000, T = 64, B = 8;
  std::set<int64_t> seen;
  for (int64_t step = 0; step < 50; ++step) {
    const auto a = train_window_starts(3, step, B, n, T);
    EXPECT_EQ(a, train_window_starts(3, step, B, n, T));  // a pure function
    EXPECT_NE(a, train_window_starts(4, step, B, n, T));
    ASSERT_EQ(static_cast<int64_t>(a.size()), B);
    for (int64_t s : a) {
      EXPECT_GE(s, 0);
      EXPECT_LE(s + T + 1, n);  // the window and its targets fit
      seen.insert(s);
    }
  }
  // 400 draws over 936 starts: a uniform order reaches far more than a handful (both ends included).
  EXPECT_GT(seen.size(), 250u);
  EXPECT_EQ(train_window_starts(0, 0, 3, T + 1, T), (std::vector<int64_t>{0, 0, 0}));  // one window only
  EXPECT_THROW(train_window_starts(0, 0, 1, T, T), c10::Error);                        // not even one
}

TEST(DataOrder, ValidationWindowsSpanTheFile) {
  const auto v = validation_window_starts(5, 1000, 99);
  EXPECT_EQ(v, (std::vector<int64_t>{0, 225, 450, 675, 900}));  // last start: 1000 - 99 - 1
  EXPECT_EQ(validation_window_starts(1, 1000, 99), std::vector<int64_t>{0});
}

TEST(DataOrder, BatchTargetsAreTheNextTokens) {
  const std::string dir = testing::temp_dir("batch");
  std::vector<uint16_t> ids(100);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint16_t>(i * 3);
  write_token_file(dir + "/t.bin", ids);
  TokenFile f(dir + "/t.bin", 512);
  const Batch b = batch_of(f, {0, 10, 95}, 4, c10::Device("cpu"));
  ASSERT_EQ(b.inputs.sizes(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(b.inputs.scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(b.inputs[1], torch::tensor({30, 33, 36, 39}, torch::kLong)));
  EXPECT_TRUE(torch::equal(b.targets[1], torch::tensor({33, 36, 39, 42}, torch::kLong)));
  EXPECT_EQ(b.targets[2][3].item<int64_t>(), 99 * 3);  // the last token of the file
}

}  // namespace
}  // namespace lmscale
