// Waiting for a quiet machine before a failed timing check is measured again: the rule, with a
// scripted probe and sleep (no wall-clock assertions); and the probe's range on this machine.
#include "ddplab/grader/contention.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "ddplab/grader/checks.h"

namespace ddplab::grader {
namespace {

struct Scripted {
  explicit Scripted(std::vector<double> c) : capacities(std::move(c)) {}
  std::vector<double> capacities;  // what each probe returns, in turn (the last one repeats)
  size_t probes = 0;
  std::vector<double> slept;
  std::string said;
  QuietWait wait(double max_wait_s) {
    return wait_for_quiet_machine(
        2, 0.8, max_wait_s, 5.0,
        [&](int threads) {
          EXPECT_EQ(threads, 2);
          const double c = capacities[std::min(probes, capacities.size() - 1)];
          ++probes;
          return c;
        },
        [&](double s) { slept.push_back(s); }, [&](const std::string& s) { said += s; });
  }
};

TEST(QuietMachine, AQuietMachineIsMeasuredAtOnce) {
  Scripted s({1.93});
  const QuietWait w = s.wait(120);
  EXPECT_TRUE(w.quiet);
  EXPECT_DOUBLE_EQ(w.waited_s, 0.0);
  EXPECT_TRUE(s.slept.empty());
  EXPECT_TRUE(s.said.empty()) << s.said;
}

TEST(QuietMachine, ABusyMachineIsWaitedForUntilItFreesItsCores) {
  // A core held elsewhere (1.0, 1.1), then given back (1.9): two pauses of 5 s.
  Scripted s({1.0, 1.1, 1.9});
  const QuietWait w = s.wait(120);
  EXPECT_TRUE(w.quiet);
  EXPECT_DOUBLE_EQ(w.waited_s, 10.0);
  EXPECT_EQ(s.slept, (std::vector<double>{5.0, 5.0}));
  EXPECT_DOUBLE_EQ(w.capacity, 1.9);
  EXPECT_NE(s.said.find("the machine gives 1.0 of 2 cores now"), std::string::npos) << s.said;
  EXPECT_NE(s.said.find("waiting up to 120 s"), std::string::npos) << s.said;
}

TEST(QuietMachine, TheWaitEndsAtItsLimitOnAMachineThatStaysBusy) {
  Scripted s({1.0});
  const QuietWait w = s.wait(12);
  EXPECT_FALSE(w.quiet);
  EXPECT_DOUBLE_EQ(w.waited_s, 10.0);  // two pauses of 5 s fit in 12 s, a third would not
  EXPECT_EQ(s.probes, 3u);
  EXPECT_DOUBLE_EQ(w.capacity, 1.0);
}

TEST(QuietMachine, TheShareIsOfTheCoresAsked) {
  Scripted s({1.59, 1.6});
  const QuietWait w = s.wait(120);
  EXPECT_TRUE(w.quiet);  // 1.6 = 0.8 x 2: enough
  EXPECT_EQ(s.probes, 2u);
}

TEST(TimingKinds, AreTheKindsWhoseFigureIsATime) {
  // Measured again on failure and calibrated as medians: throughput and waiting, nothing exact.
  for (const char* kind : {"scaling", "exposed_comm", "data_wait"}) EXPECT_TRUE(is_timing_kind(kind)) << kind;
  for (const char* kind : {"auc", "coverage", "parity", "utilization", "unit_tests", "no_such_kind"}) {
    EXPECT_FALSE(is_timing_kind(kind)) << kind;
  }
}

TEST(ParallelCapacity, IsBetweenOneCoreAndTheCoresAsked) {
  // Not a timing assertion: whatever the machine's load, the figure is a share of the cores asked.
  const double one = parallel_capacity(1);
  EXPECT_GT(one, 0.0);
  EXPECT_LE(one, 1.0);
  const double two = parallel_capacity(2);
  EXPECT_GT(two, 0.0);
  EXPECT_LE(two, 2.0);
}

}  // namespace
}  // namespace ddplab::grader
