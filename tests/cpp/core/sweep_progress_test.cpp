// Progress lines of a sweep: count, elapsed time, ETA from the cells measured so far, each cell's
// time; colour only on a terminal (and never with NO_COLOR or TERM=dumb).
#include <gtest/gtest.h>

#include <sstream>
#include <stdexcept>
#include <thread>

#include "core/sweep_progress.h"

namespace lmscale {

TEST(SweepProgress, ColourOnlyOnATerminal) {
  EXPECT_TRUE(use_colour(true, nullptr, "xterm-256color"));
  EXPECT_TRUE(use_colour(true, "", "xterm"));
  EXPECT_FALSE(use_colour(false, nullptr, "xterm"));  // a pipe or a log file
  EXPECT_FALSE(use_colour(true, "1", "xterm"));       // NO_COLOR
  EXPECT_FALSE(use_colour(true, nullptr, "dumb"));
}

TEST(SweepProgress, ClockTime) {
  EXPECT_EQ(clock_time(0), "0:00");
  EXPECT_EQ(clock_time(42.4), "0:42");
  EXPECT_EQ(clock_time(190), "3:10");
  EXPECT_EQ(clock_time(3725), "1:02:05");
  EXPECT_EQ(clock_time(-3), "0:00");
}

TEST(SweepProgress, LinesCountTimeAndEstimateWhatIsLeft) {
  std::ostringstream out;
  SweepProgress p(4, out, /*colour=*/false);
  p.skip(1);  // resumed: counted, not timed
  p.begin("small ctx 128 lmscale");
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  p.end(Status::ok, "12.00 ms");
  p.report("small ctx 128 torch-eager", Status::oom, "oom");
  const std::string text = out.str();
  const size_t newline = text.find('\n');
  ASSERT_NE(newline, std::string::npos) << text;
  const std::string first = text.substr(0, newline), second = text.substr(newline + 1);
  // No estimate before a cell was measured; the first line is cell 2 of 4 (one resumed).
  EXPECT_EQ(first.rfind("[2/4 0:00] small ctx 128 lmscale ... 12.00 ms (0.", 0), 0u) << first;
  EXPECT_NE(first.find(" s)"), std::string::npos) << first;
  // After one measured cell of ~0.4 s, two are left (this one and the next): ETA 0:01 (~0.8 s).
  EXPECT_EQ(second.rfind("[3/4 0:00 ETA 0:01] small ctx 128 torch-eager ... oom (", 0), 0u) << second;
  EXPECT_EQ(text.find('\033'), std::string::npos) << "colour without a terminal";
  EXPECT_EQ(p.done(), 3u);
}

TEST(SweepProgress, ColoursTheOutcomeByStatus) {
  std::ostringstream out;
  SweepProgress p(3, out, /*colour=*/true);
  p.report("a", Status::ok, "1.00 ms");
  p.report("b", Status::oom, "oom");
  p.report("c", Status::error, "error");
  const std::string text = out.str();
  EXPECT_NE(text.find("\033[32m1.00 ms\033[0m"), std::string::npos) << text;
  EXPECT_NE(text.find("\033[33moom\033[0m"), std::string::npos) << text;
  EXPECT_NE(text.find("\033[31merror\033[0m"), std::string::npos) << text;
}

TEST(OpenLine, EndsItsLineWithTheOutcomeOrWhenTheCellThrows) {
  std::ostringstream out;
  {
    OpenLine line(out, /*active=*/true, "[zero] tiny fp32 zero2");
    line.close("1.50 ms");
  }
  try {
    OpenLine line(out, true, "[ddp] tiny fp32 bucketed");
    throw std::runtime_error("rank 1 failed");
  } catch (const std::runtime_error& e) {
    out << "error: " << e.what() << "\n";  // as the CLI prints it
  }
  { OpenLine silent(out, /*active=*/false, "[comm] not rank 0"); }
  EXPECT_EQ(out.str(),
            "[zero] tiny fp32 zero2 ... 1.50 ms\n"
            "[ddp] tiny fp32 bucketed ...\n"
            "error: rank 1 failed\n");
}

}  // namespace lmscale
