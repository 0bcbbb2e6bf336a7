// Clean-up of the tests' temporary folders; see temp_dirs.h.
#include "support/temp_dirs.h"

#include <ftw.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <mutex>
#include <vector>

namespace lmscale::testing {
namespace {

std::mutex& dirs_mutex() {
  static std::mutex m;
  return m;
}

// Folders made by the running test, and by set-up outside any test (kept until its suite ends).
std::vector<std::string>& pending() {
  static std::vector<std::string> dirs;
  return dirs;
}
std::vector<std::string>& shared() {
  static std::vector<std::string> dirs;
  return dirs;
}

void settle(std::vector<std::string>& list, bool passed, const char* where) {
  std::vector<std::string> dirs;
  {
    std::lock_guard<std::mutex> lock(dirs_mutex());
    dirs.swap(list);
  }
  for (const auto& d : dirs) {
    if (passed)
      remove_tree(d);
    else
      std::fprintf(stderr, "kept %s (%s failed)\n", d.c_str(), where);
  }
}

// Removes (or keeps) the folders of each test as it ends.
class TempDirCleaner : public ::testing::EmptyTestEventListener {
  static void pending_to_shared() {
    std::lock_guard<std::mutex> lock(dirs_mutex());
    shared().insert(shared().end(), pending().begin(), pending().end());
    pending().clear();
  }
  void OnTestStart(const ::testing::TestInfo&) override { pending_to_shared(); }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    const std::string name = std::string(info.test_suite_name()) + "." + info.name();
    settle(pending(), !info.result()->Failed(), name.c_str());
  }
  void OnTestSuiteEnd(const ::testing::TestSuite& suite) override {
    pending_to_shared();  // folders its tear-down made join the suite's
    settle(shared(), !suite.Failed(), suite.name());
  }
  void OnTestProgramEnd(const ::testing::UnitTest& unit) override {
    settle(pending(), unit.Passed(), "the run");
    settle(shared(), unit.Passed(), "the run");
  }
};

// Registered before main (gtest_main) runs the tests; the listener list owns it.
const bool registered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new TempDirCleaner);
  return true;
}();

}  // namespace

std::string temp_dir(const std::string& tag) {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/lmscale-test-" + tag + "-XXXXXX";
  char* made = mkdtemp(tmpl.data());
  if (!made) return std::string();
  std::lock_guard<std::mutex> lock(dirs_mutex());
  pending().push_back(made);
  return made;
}

bool remove_tree(const std::string& path) {
  auto remove_one = [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p) == 0 ? 0 : -1; };
  return nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace lmscale::testing
