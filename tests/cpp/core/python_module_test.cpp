// The binary finds lmscale's Python package without a compiled-in source path: from the test binary
// in the build folder, python_package_dir() is the checkout's python/ folder, and a module command
// gets it on PYTHONPATH ahead of the caller's.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "core/python_module.h"

namespace lmscale {

TEST(PythonModule, FindsThePackageFromTheBuildFolder) {
  const std::string dir = python_package_dir();
  ASSERT_FALSE(dir.empty());
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(dir) / "lmscale" / "baseline" / "e2e.py")) << dir;
  EXPECT_TRUE(std::filesystem::equivalent(dir, std::filesystem::path(LMSCALE_SOURCE_DIR) / "python")) << dir;
}

// Sets an environment variable for one scope, then puts back what was there.
struct ScopedEnv {
  std::string name, old;
  bool had;
  ScopedEnv(const char* n, const char* value) : name(n), had(std::getenv(n) != nullptr) {
    if (had) old = std::getenv(n);
    setenv(n, value, 1);
  }
  ~ScopedEnv() { had ? (void)setenv(name.c_str(), old.c_str(), 1) : (void)unsetenv(name.c_str()); }
};

TEST(PythonModule, CommandRunsTheInterpreterWithThePackageOnThePath) {
  ScopedEnv python("LMSCALE_PYTHON", "/opt/py/bin/python3"), path("PYTHONPATH", "/elsewhere");
  const auto argv = python_module_argv("lmscale.baseline.e2e", {"--impl", "torch-eager"});
  EXPECT_EQ(argv, (std::vector<std::string>{"/opt/py/bin/python3", "-m", "lmscale.baseline.e2e", "--impl",
                                            "torch-eager"}));
  EXPECT_NE(python_fix().find("LMSCALE_PYTHON"), std::string::npos);
  EXPECT_NE(python_fix().find("/opt/py/bin/python3"), std::string::npos);
  const ProcessOptions o = python_module_options({});
  ASSERT_EQ(o.env.size(), 1u);
  EXPECT_EQ(o.env[0].first, "PYTHONPATH");
  EXPECT_EQ(o.env[0].second, python_package_dir() + ":/elsewhere");
}

}  // namespace lmscale
