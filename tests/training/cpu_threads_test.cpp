// --cpu-threads (apps/training/cpu_threads.h): the governor's policy (average, hysteresis, clamp),
// its /proc sample seeing another process's busy loop, and the option's checks.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "apps/training/cpu_threads.h"
#include "engine/error.h"

namespace {

using training::CpuThreadGovernor;

TEST(CpuThreads, OneBusyProcessOnTwoCpusTakesOneThreadAfterFiveSamples) {
  CpuThreadGovernor g(2, 2);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(g.observe(0), 2);
  // Medians 0, 1, 1, 1, 1 -> averages 0, 0.3, 0.51, 0.66, 0.76 (wanted 2, 2, 1, 1, 1): the fifth
  // sample is the third in a row wanting 1.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(g.observe(1), 2) << i;
  EXPECT_EQ(g.observe(1), 1);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(g.observe(1), 1);
  // The competitor leaves: medians 1, 0, 0, 0, 0 (wanted 1, 1, 2, 2, 2) and the count comes back.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(g.observe(0), 1) << i;
  EXPECT_EQ(g.observe(0), 2);
}

TEST(CpuThreads, ASingleSpikeDoesNotMoveTheCount) {
  CpuThreadGovernor g(2, 2);
  for (double burst : {1.0, 3.0, 4.0, 50.0}) {
    EXPECT_EQ(g.observe(burst), 2);  // a burst of tasks, once
    for (int i = 0; i < 6; ++i) EXPECT_EQ(g.observe(0), 2) << burst;
  }
  CpuThreadGovernor big(8, 8);
  EXPECT_EQ(big.observe(200), 8);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(big.observe(0), 8);
  EXPECT_EQ(big.load(), 0.0);  // the burst never entered the average
}

TEST(CpuThreads, TheCountStaysWithinOneAndTheQuietCount) {
  CpuThreadGovernor g(8, 8);
  for (int i = 0; i < 30; ++i) g.observe(3);
  EXPECT_EQ(g.threads(), 5);
  EXPECT_NEAR(g.load(), 3.0, 0.01);
  for (int i = 0; i < 30; ++i) g.observe(40);
  EXPECT_EQ(g.threads(), 1);
  for (int i = 0; i < 30; ++i) g.observe(0);
  EXPECT_EQ(g.threads(), 8);
  CpuThreadGovernor few(2, 16);  // a 2-thread run on a 16-CPU machine with 5 busy tasks: still 2
  for (int i = 0; i < 30; ++i) few.observe(5);
  EXPECT_EQ(few.threads(), 2);
  CpuThreadGovernor bad(0, 0);  // counts below 1 are taken as 1
  EXPECT_EQ(bad.observe(0), 1);
}

// The /proc sample counts another process's runnable busy loop (and never this process's threads:
// a busy thread of our own does not raise it by itself).
TEST(CpuThreads, TheSampleSeesABusyProcessButNotOurOwnThreads) {
  const double idle = CpuThreadGovernor::other_runnable_tasks();
  ASSERT_GE(idle, 0.0) << "/proc/stat or /proc/self/task unreadable";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    volatile unsigned long x = 0;
    for (;;) x = x + 1;
  }
  double most = 0;
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    most = std::max(most, CpuThreadGovernor::other_runnable_tasks());
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_GE(most, 1.0);
}

TEST(CpuThreads, OptionChecks) {
  for (const char* ok : {"", "auto", "1", "2", "1024"}) EXPECT_NO_THROW(training::check_cpu_threads_option(ok, false)) << ok;
  EXPECT_NO_THROW(training::check_cpu_threads_option("3", true));
  for (const char* bad : {"0", "-1", "1025", "abc", "2x", "Auto"}) {
    try {
      training::check_cpu_threads_option(bad, false);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const engine::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
  try {
    training::check_cpu_threads_option("auto", true);
    ADD_FAILURE() << "auto accepted with --deterministic";
  } catch (const engine::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--deterministic"), std::string::npos) << e.what();
  }
}

}  // namespace
