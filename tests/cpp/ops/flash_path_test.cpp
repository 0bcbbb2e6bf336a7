// ops::set_flash_path, the one switch for the kernel path (kernels::FlashPath): it returns the previous
// path, rejects unknown names with the list, and needs the CUDA kernels. No GPU needed.
#include <gtest/gtest.h>

#include <string>

#include "ops/flash_attention.h"

namespace lmscale::ops {
namespace {

TEST(FlashPath, SetReturnsThePreviousPathAndRejectsUnknownNames) {
#ifndef LMSCALE_HAS_KERNELS
  EXPECT_THROW(set_flash_path("auto"), c10::Error) << "a build without kernels has no path to choose";
#else
  const std::string start = set_flash_path("hopper");
  EXPECT_EQ(start, "auto") << "the process starts on the automatic choice";
  EXPECT_EQ(set_flash_path("mma-sync"), "hopper");
  try {
    set_flash_path("fa3");
    FAIL() << "no error for an unknown path";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("auto, hopper, mma-sync"), std::string::npos) << e.what();
  }
  EXPECT_EQ(set_flash_path(start), "mma-sync") << "a rejected name must leave the path as it was";
#endif
}

}  // namespace
}  // namespace lmscale::ops
