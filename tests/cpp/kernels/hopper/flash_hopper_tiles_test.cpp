// The Hopper kernels' tile choices (kernels/hopper/flash_hopper_tiles.h) on the CPU: including the header
// already static_asserts them for every head dim of HopperHeadDims; here each rule is shown to reject a bad
// tile, so the compile-time checks can fail, and the shipped choices are printed.
#include <gtest/gtest.h>

#include "kernels/flash_head_dims.h"
#include "kernels/hopper/flash_hopper_tiles.h"
#include "kernels/hopper/wgmma_widths.h"

namespace lmscale::kernels::hopper {
namespace {

TEST(FlashHopperTiles, EveryHopperHeadDimHasATileTheRulesAccept) {
  ASSERT_GT(HopperHeadDims::kValues.size(), 0u);
  for (int d : HopperHeadDims::kValues) {
    SCOPED_TRACE("d = " + std::to_string(d));
    EXPECT_TRUE(FlashHeadDims::contains(d)) << "a Hopper head dim outside the one list";
    EXPECT_TRUE(wgmma_width_generated(d));
    EXPECT_TRUE(wgmma_width_generated(fwd_block_n(d)));
    EXPECT_EQ(fwd_block_m(d), 64 * fwd_consumers(d));
    EXPECT_TRUE(fwd_ping_pong_valid(fwd_consumers(d), fwd_ping_pong(d)));
    EXPECT_TRUE(fwd_fits_smem(d, fwd_block_n(d), fwd_consumers(d), fwd_q_slots(d)));
    if (fwd_has_short_tile(d)) {  // FwdShort: ping-pong consumer groups
      EXPECT_TRUE(wgmma_width_generated(fwd_short_block_n(d)));
      EXPECT_TRUE(fwd_ping_pong_valid(fwd_short_consumers(d), true));
      EXPECT_TRUE(fwd_fits_smem(d, fwd_short_block_n(d), fwd_short_consumers(d), fwd_q_slots(d)));
    }
    EXPECT_TRUE(bwd_block_m_valid(bwd_block_m(d)));
    EXPECT_TRUE(wgmma_width_generated(bwd_block_m(d)));
    std::printf("d=%d: forward %d x %d (%d consumers%s), backward %d-query tiles\n", d, fwd_block_m(d), fwd_block_n(d),
                fwd_consumers(d), fwd_ping_pong(d) ? ", ping-pong" : "", bwd_block_m(d));
  }
}

TEST(FlashHopperTiles, OnlyShortCausalCallsTakeTheShortTile) {
  EXPECT_TRUE(fwd_takes_short_tile(64, true, 512));
  EXPECT_TRUE(fwd_takes_short_tile(64, true, kFwdShortKeys));
  EXPECT_FALSE(fwd_takes_short_tile(64, true, kFwdShortKeys + 1)) << "long calls keep the shipped tile";
  EXPECT_FALSE(fwd_takes_short_tile(64, false, 512)) << "non-causal calls keep the shipped tile";
  EXPECT_FALSE(fwd_takes_short_tile(80, true, 512)) << "d = 80 has no short tile";
  EXPECT_FALSE(fwd_takes_short_tile(128, true, 512)) << "d = 128's shipped tile is the short one's shape";
}

TEST(FlashHopperTiles, TheRulesRejectBadTiles) {
  EXPECT_FALSE(wgmma_width_generated(112)) << "112 is not in generate_wgmma.py's NS";
  EXPECT_FALSE(wgmma_width_generated(0));
  EXPECT_FALSE(fwd_ping_pong_valid(3, true));
  EXPECT_TRUE(fwd_ping_pong_valid(3, false));
  EXPECT_FALSE(fwd_fits_smem(128, 256, 2, 1)) << "Q 32 KB + 2 x (K + V) of 64 KB each";
  EXPECT_TRUE(fwd_fits_smem(128, 128, 2, 1));
  EXPECT_TRUE(fwd_fits_smem(128, 128, 2, 2)) << "two Q slots of 32 KB + 2 x (K + V) of 32 KB each";
  EXPECT_FALSE(fwd_fits_smem(128, 176, 2, 2)) << "two Q slots of 32 KB + 2 x (K + V) of 44 KB each";
  EXPECT_FALSE(bwd_block_m_valid(96));
  EXPECT_FALSE(bwd_block_m_valid(256));
}

TEST(FlashHopperTiles, PaddedHeadDimFollowsTheSwizzle) {
  EXPECT_EQ(padded_head_dim(64), 64);
  EXPECT_EQ(padded_head_dim(128), 128);
  EXPECT_EQ(padded_head_dim(80), 96);  // 64-byte swizzle, 32-column chunks
  EXPECT_EQ(padded_head_dim(96), 96);
}

}  // namespace
}  // namespace lmscale::kernels::hopper
