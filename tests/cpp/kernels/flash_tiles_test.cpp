// The FlashAttention-2 tile choices (src/kernels/flash_tiles.h) on the CPU: for every head dim the
// generator can build, each block splits into whole m16 warp tiles, fits one block's shared memory
// on Hopper (227 KB), and pads shared-memory rows so ldmatrix reads are free of bank conflicts.
// Plain constexpr functions: no GPU, no CUDA headers (docs/design.md §5.2).
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <string>

#include "kernels/flash_head_dims.h"
#include "kernels/flash_tiles.h"
#include "kernels/flash_variants.h"

namespace lmscale {
namespace {

namespace tiles = kernels::flash_tiles;

// Every head dim generate_flash_kernels.py writes a variant for, built or not in this configuration.
constexpr auto kHeadDims = kernels::FlashHeadDims::kValues;  // the one list (flash_head_dims.h)

TEST(FlashTiles, ForwardBlocksSplitIntoWholeWarpTilesAndFitSharedMemory) {
  for (int d : kHeadDims) {
    SCOPED_TRACE("head dim " + std::to_string(d));
    const int m = tiles::fwd_block_m(d), n = tiles::fwd_block_n(d), warps = tiles::fwd_warps(d);
    EXPECT_EQ(m % (warps * tiles::kRowsPerWarp), 0) << m << " query rows over " << warps << " warps";
    EXPECT_EQ(n % 16, 0) << "key steps are whole k16 MMA tiles";
    EXPECT_LE(tiles::fwd_smem_bytes(d, m, n), tiles::kMaxSmemBytes);
  }
}

TEST(FlashTiles, BackwardBlocksSplitIntoWholeWarpTilesAndFitSharedMemory) {
  for (int d : kHeadDims) {
    SCOPED_TRACE("head dim " + std::to_string(d));
    const int m = tiles::bwd_block_m(d), n = tiles::bwd_block_n(d);
    EXPECT_EQ(n, tiles::kRowsPerWarp * tiles::bwd_key_tiles(d) * tiles::bwd_warps(d));
    EXPECT_EQ(m % tiles::kRowsPerWarp, 0) << "query tiles are whole m16 tiles";
    EXPECT_LE(tiles::bwd_smem_bytes(d, m, n), tiles::kMaxSmemBytes);
  }
  // The measured choice of flash_tiles.h: narrow heads give each warp two key tiles, wide heads one.
  EXPECT_EQ(tiles::bwd_key_tiles(64), 2);
  EXPECT_EQ(tiles::bwd_key_tiles(128), 1);
}

TEST(FlashTiles, PaddedRowsAreAlignedAndFreeOfBankConflicts) {
  for (int d : kHeadDims) {
    SCOPED_TRACE("head dim " + std::to_string(d));
    EXPECT_EQ(tiles::smem_row(d) * 2 % 16, 0) << "rows of 16-bit elements start on 16-byte boundaries";
    EXPECT_TRUE(tiles::padded_row_is_conflict_free(d));
  }
}

// The head dims this build holds are among those checked above.
TEST(FlashTiles, EveryBuiltHeadDimIsChecked) {
  for (int d : kernels::BuiltHeadDims::kValues)
    EXPECT_NE(std::find(std::begin(kHeadDims), std::end(kHeadDims), d), std::end(kHeadDims)) << d;
}

}  // namespace
}  // namespace lmscale
