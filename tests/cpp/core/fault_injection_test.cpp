// LMSCALE_INJECT_FAULT / LMSCALE_INJECT_OOM: one parser for every injected fault (the e2e cell
// faults and the CUDA-graph capture-sync), matching by size and optionally context, and a bad entry
// is an error naming it and the allowed faults.
#include <gtest/gtest.h>

#include <c10/util/Exception.h>

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/fault_injection.h"

using lmscale::FaultSpec;
using lmscale::InjectedFault;

namespace {

// Sets the two variables for one test and restores them after it.
class InjectEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"LMSCALE_INJECT_FAULT", "LMSCALE_INJECT_OOM"}) {
      const char* v = std::getenv(name);
      saved_.push_back(v ? std::string(v) : std::string("\x01unset"));
      unsetenv(name);
    }
  }
  void TearDown() override {
    const char* names[] = {"LMSCALE_INJECT_FAULT", "LMSCALE_INJECT_OOM"};
    for (size_t i = 0; i < 2; ++i) {
      if (saved_[i] == "\x01unset") unsetenv(names[i]);
      else setenv(names[i], saved_[i].c_str(), 1);
    }
  }
  std::vector<std::string> saved_;
};

std::string message_of(const std::string& spec) {
  try {
    lmscale::parse_fault_specs(spec);
  } catch (const lmscale::UsageError& e) {  // a usage error: the CLI exits 2 for it
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(FaultInjection, ParsesEveryFaultWithAndWithoutContext) {
  auto specs = lmscale::parse_fault_specs("oom@tiny:16,capture@small,error@medium:128,capture-sync@2.7B");
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_EQ(specs[0].fault, InjectedFault::oom);
  EXPECT_EQ(specs[0].size, "tiny");
  EXPECT_EQ(specs[0].context, 16);
  EXPECT_EQ(specs[1].fault, InjectedFault::capture);
  EXPECT_EQ(specs[1].context, -1);
  EXPECT_EQ(specs[2].fault, InjectedFault::error);
  EXPECT_EQ(specs[2].context, 128);
  EXPECT_EQ(specs[3].fault, InjectedFault::capture_sync);
  EXPECT_EQ(specs[3].size, "2.7B");
  for (auto f : {InjectedFault::oom, InjectedFault::capture, InjectedFault::error, InjectedFault::capture_sync,
                 InjectedFault::diverge})
    EXPECT_EQ(lmscale::parse_fault_specs(lmscale::to_string(f) + "@x")[0].fault, f) << lmscale::to_string(f);
  EXPECT_TRUE(lmscale::parse_fault_specs("").empty());
}

TEST(FaultInjection, BadEntriesNameTheEntryAndWhatIsAllowed) {
  EXPECT_NE(message_of("oom").find("entry 'oom' is not <fault>@<size>[:<context>]"), std::string::npos)
      << message_of("oom");
  const std::string unknown = message_of("capture@small,explode@tiny");
  EXPECT_NE(unknown.find("unknown fault 'explode'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("capture-sync"), std::string::npos) << unknown;
  const std::string context = message_of("oom@tiny:many");
  EXPECT_NE(context.find("'many'"), std::string::npos) << context;
}

TEST_F(InjectEnv, MatchesSizeAndContextFromBothVariablesInOrder) {
  EXPECT_TRUE(lmscale::injected_faults("tiny", 16).empty());
  setenv("LMSCALE_INJECT_OOM", "tiny:16", 1);
  setenv("LMSCALE_INJECT_FAULT", "capture-sync@small,error@tiny", 1);
  EXPECT_EQ(lmscale::injected_faults("tiny", 16), (std::vector<InjectedFault>{InjectedFault::oom, InjectedFault::error}));
  EXPECT_EQ(lmscale::injected_faults("tiny", 32), (std::vector<InjectedFault>{InjectedFault::error}));
  EXPECT_TRUE(lmscale::fault_injected(InjectedFault::capture_sync, "small", 512));
  EXPECT_FALSE(lmscale::fault_injected(InjectedFault::capture_sync, "medium", 512));
  EXPECT_FALSE(lmscale::fault_injected(InjectedFault::oom, "small", 16));
}

// Issue 29, row 5: the settings are checked at start, so a typo is refused instead of injecting nothing,
// and the command the records carry names what was injected.
TEST_F(InjectEnv, SettingsAreCheckedAgainstTheKnownSizesAndShownInTheCommand) {
  const std::vector<std::string> sizes{"tiny", "small"};
  EXPECT_NO_THROW(lmscale::check_fault_injection(sizes));
  EXPECT_EQ(lmscale::fault_injection_prefix(), "");
  setenv("LMSCALE_INJECT_FAULT", "nonsense", 1);
  EXPECT_THROW(lmscale::check_fault_injection(sizes), lmscale::UsageError);
  setenv("LMSCALE_INJECT_FAULT", "oom@nosuchsize", 1);
  try {
    lmscale::check_fault_injection(sizes);
    ADD_FAILURE() << "an unknown size was accepted";
  } catch (const lmscale::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("'nosuchsize' is not a model size"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tiny, small"), std::string::npos) << e.what();
  }
  setenv("LMSCALE_INJECT_FAULT", "error@small", 1);
  setenv("LMSCALE_INJECT_OOM", "tiny:16", 1);
  EXPECT_NO_THROW(lmscale::check_fault_injection(sizes));
  EXPECT_EQ(lmscale::fault_injection_prefix(), "LMSCALE_INJECT_OOM=tiny:16 LMSCALE_INJECT_FAULT=error@small ");
}

// A fault made on purpose carries its kind, so a cell's status never depends on the words of a message.
TEST(FaultInjection, AnInjectedFailureCarriesItsKind) {
  const lmscale::InjectedFaultError e(InjectedFault::capture, "CUDA error: anything at all");
  EXPECT_EQ(e.fault(), InjectedFault::capture);
  EXPECT_FALSE(lmscale::is_out_of_memory(e));
  EXPECT_FALSE(lmscale::is_out_of_memory(std::runtime_error("this message says out of memory but is not one")));
  EXPECT_TRUE(lmscale::is_out_of_memory(std::bad_alloc()));
}
