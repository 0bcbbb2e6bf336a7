// Memory harness: the event replay finds the peak, the blocks live at it and their origins; the
// residual-activation formula; and on a CPU-only run every CUDA part says it needs CUDA (n/a
// cells, no crash), through the library and through `lmscale memory`.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "profile/memory_run.h"
#include "profile/memory_timeline.h"

namespace lmscale {
namespace {

TEST(MemoryTimeline, ReplayFindsPeakAndLiveBlocks) {
  std::mt19937 rng(std::random_device{}());
  const int64_t big = 1000 + rng() % 1000, small = 10 + rng() % 10, base = rng() % 500;
  std::vector<AllocEvent> ev = {
      {true, 0xA, big, "forward", "attention/softmax: aten::softmax"},
      {true, 0xB, small, "forward", "aten::mm"},
      {false, 0xF, 7, "forward", "aten::mm"},   // a block from before recording (part of baseline)
      {true, 0xC, small, "forward", "aten::mm"},
      {false, 0xB, small, "backward", "MmBackward0"},  // after the peak
      {false, 0xA, big, "backward", "SoftmaxBackward0"},
      {true, 0xA, small, "backward", "MmBackward0"},  // address reused
  };
  auto t = replay(ev, base);
  ASSERT_EQ(t.active.size(), ev.size());
  EXPECT_EQ(t.peak_event, 3u);
  EXPECT_EQ(t.peak_bytes, base + big + small - 7 + small);
  EXPECT_EQ(t.active.back(), base - 7 + 2 * small);
  ASSERT_EQ(t.live_at_peak.size(), 3u);
  EXPECT_EQ(t.live_at_peak[0].size, big);
  EXPECT_EQ(t.live_at_peak[0].where, "attention/softmax: aten::softmax");
  ASSERT_EQ(t.origins_at_peak.size(), 2u);
  EXPECT_EQ(t.origins_at_peak[0].bytes, big);
  EXPECT_EQ(t.origins_at_peak[1].bytes, 2 * small);
  EXPECT_EQ(t.origins_at_peak[1].blocks, 2);

  auto empty = replay({}, base);
  EXPECT_EQ(empty.peak_bytes, base);
  EXPECT_TRUE(empty.live_at_peak.empty());
}

TEST(MemoryTimeline, JsonDownsamplingKeepsThePeak) {
  std::mt19937 rng(std::random_device{}());
  std::vector<AllocEvent> ev;
  for (int i = 0; i < 1000; ++i) ev.push_back({true, static_cast<uint64_t>(i), 1 + int64_t(rng() % 100), "forward", "x"});
  for (int i = 0; i < 1000; ++i) ev.push_back({false, static_cast<uint64_t>(i), ev[i].size, "backward", "y"});
  auto t = replay(ev, 0);
  auto j = timeline_json(t, ev, 5, 30);
  EXPECT_LE(j["active_bytes"].size(), 30u);
  int64_t max = 0;
  for (const auto& b : j["active_bytes"]) max = std::max<int64_t>(max, b.get<int64_t>());
  EXPECT_EQ(max, t.peak_bytes);
  EXPECT_EQ(j["largest_live_at_peak"].size(), 5u);
  ASSERT_EQ(j["phases"].size(), 2u);
  EXPECT_EQ(j["phases"][1]["first"], 1000);
}

TEST(MemoryTimeline, ResidualActivationIsBTd4) {
  EXPECT_EQ(residual_activation_bytes(4, 512, 2560), 4LL * 512 * 2560 * 4);  // 20 MiB
  EXPECT_EQ(residual_activation_bytes(1, 1, 1), 4);
  EXPECT_THROW(residual_activation_bytes(0, 128, 2560), c10::Error);
}

TEST(MemoryRun, CpuSaysItNeedsCuda) {
  StepSetup s;
  s.model = model_config("tiny");
  s.context = 8;
  s.batch = 1;
  s.device = c10::Device("cpu");
  EXPECT_NE(memory_unsupported_reason(s.device).find("CUDA"), std::string::npos);
  PeakCell c = measure_peak(s, StepMode::TrainStep);
  EXPECT_EQ(c.status, "n/a");
  EXPECT_NE(c.note.find("CUDA"), std::string::npos);
  try {
    record_memory(s, StepMode::Forward, 1, "");
    FAIL() << "record_memory on CPU should throw";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("need a CUDA device"), std::string::npos) << e.what();
  }
}

TEST(MemoryRun, CliOnCpuWritesNaTable) {
  auto dir = std::filesystem::temp_directory_path() / ("lmscale_mem_" + std::to_string(std::random_device{}()));
  const std::string cmd = std::string(LMSCALE_CLI_PATH) + " memory --device cpu --size tiny --contexts 8 16 --out " +
                          dir.string() + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream md(dir / "memory.md");
  std::stringstream ss;
  ss << md.rdbuf();
  const std::string s = ss.str();
  EXPECT_NE(s.find("n/a"), std::string::npos) << s;
  EXPECT_NE(s.find("Snapshots skipped"), std::string::npos) << s;
  EXPECT_NE(s.find("T=16: 16.00 KiB"), std::string::npos) << s;  // B=4 · T=16 · d=64 · 4 bytes
  // Not std::filesystem::remove_all: the test binary resolves it to libtorch's copy, which crashes.
  std::system(("rm -rf '" + dir.string() + "'").c_str());
}

}  // namespace
}  // namespace lmscale
