// The capability check before the first kernel launch, with faked GPUs: which builds run where, and
// that a refusal names the GPU, its capability, what was built and the fix.
#include <gtest/gtest.h>

#include "core/device.h"

namespace lmscale {
namespace {

const std::vector<int> kDefault{80, 86, 89, 90};

TEST(KernelSupport, DefaultBuildRunsOnTheGpusStudentsHave) {
  EXPECT_EQ(kernel_support("NVIDIA A100-SXM4-80GB", 8, 0, kDefault).how, "sm_80 machine code");
  EXPECT_EQ(kernel_support("NVIDIA A10", 8, 6, kDefault).how, "sm_86 machine code");
  EXPECT_EQ(kernel_support("Jetson Orin", 8, 7, kDefault).how, "sm_86 machine code");  // same major, newer minor
  EXPECT_EQ(kernel_support("NVIDIA L4", 8, 9, kDefault).how, "sm_89 machine code");
  EXPECT_EQ(kernel_support("NVIDIA H100 80GB HBM3", 9, 0, kDefault).how, "sm_90 machine code");
  for (auto [major, minor] : {std::pair{8, 0}, {8, 6}, {8, 9}, {9, 0}})
    EXPECT_TRUE(kernel_support("gpu", major, minor, kDefault).runs) << major << "." << minor;
}

TEST(KernelSupport, NewerGpusRunThePtxOfTheNewestArchitecture) {
  const auto k = kernel_support("NVIDIA B200", 10, 0, kDefault);
  EXPECT_TRUE(k.runs);
  EXPECT_NE(k.how.find("PTX of sm_90"), std::string::npos) << k.how;
}

TEST(KernelSupport, HopperOnlyBuildRefusesAnAmpereGpuAndSaysHowToRebuild) {
  const auto k = kernel_support("NVIDIA GeForce RTX 3090", 8, 6, {90});
  EXPECT_FALSE(k.runs);
  for (const char* part : {"NVIDIA GeForce RTX 3090", "8.6", "sm_90", "LMSCALE_CUDA_ARCHS=\"86\"", "--attention sdpa"})
    EXPECT_NE(k.message.find(part), std::string::npos) << part << " missing from: " << k.message;
}

TEST(KernelSupport, OlderThanAmpereIsRefusedWithTheAlternative) {
  const auto k = kernel_support("Tesla T4", 7, 5, kDefault);
  EXPECT_FALSE(k.runs);
  EXPECT_NE(k.message.find("7.5"), std::string::npos) << k.message;
  EXPECT_NE(k.message.find("sm_80 or later"), std::string::npos) << k.message;
  EXPECT_NE(k.message.find("--attention sdpa"), std::string::npos) << k.message;
}

TEST(KernelSupport, BuildWithoutKernelsSaysSo) {
  const auto k = kernel_support("NVIDIA H100", 9, 0, {});
  EXPECT_FALSE(k.runs);
  EXPECT_NE(k.message.find("no CUDA kernels"), std::string::npos) << k.message;
}

TEST(KernelSupport, BuiltListMatchesTheBuild) {
#ifdef LMSCALE_HAS_KERNELS
  EXPECT_FALSE(built_cuda_archs().empty());
  for (int a : built_cuda_archs()) EXPECT_GE(a, 80);
#else
  EXPECT_TRUE(built_cuda_archs().empty());
#endif
}

TEST(KernelSupport, CpuDevicesNeedNoCheck) { EXPECT_NO_THROW(check_kernels_run_on(c10::Device("cpu"))); }

}  // namespace
}  // namespace lmscale
