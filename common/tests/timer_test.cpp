// Phase accounting: totals per phase, step counting, cancel and reset. No wall-clock thresholds:
// durations are injected with add() or only compared with each other.
#include "ddplab/timer.h"

#include <vector>

#include <gtest/gtest.h>

#include "ddplab/error.h"
#include "ddplab/progress.h"

namespace {

TEST(StepTimer, AccumulatesPerPhase) {
  ddplab::StepTimer t;
  t.add(ddplab::Phase::kForward, 0.25);
  t.add(ddplab::Phase::kForward, 0.5);
  t.add(ddplab::Phase::kBackward, 1.0);
  t.add(ddplab::Phase::kOptimizer, 0.125);
  t.add(ddplab::Phase::kDataWait, 2.0);
  EXPECT_DOUBLE_EQ(t.total(ddplab::Phase::kForward), 0.75);
  EXPECT_DOUBLE_EQ(t.compute(), 1.875);  // data wait and comm are not compute
  EXPECT_DOUBLE_EQ(t.total(ddplab::Phase::kComm), 0.0);
}

TEST(StepTimer, ScopesAndStepsAreCountedAndSynchronised) {
  ddplab::StepTimer t;
  int syncs = 0;
  t.set_synchronizer([&] { ++syncs; });
  for (int i = 0; i < 3; ++i) {
    t.begin_step();
    { auto s = t.scope(ddplab::Phase::kForward); }
    t.end_step();
  }
  t.begin_step();
  t.cancel_step();  // an abandoned step is not counted
  EXPECT_EQ(t.steps(), 3);
  EXPECT_EQ(syncs, 6);  // once per phase end, once per step end
  EXPECT_GE(t.wall(), t.total(ddplab::Phase::kForward));
  EXPECT_GT(t.total(ddplab::Phase::kForward), 0.0);
  t.reset();
  EXPECT_EQ(t.steps(), 0);
  EXPECT_DOUBLE_EQ(t.wall(), 0.0);
}

TEST(StepTimer, KeepsEachStepsPhasesForTheirMedians) {
  // Three steps' data waits of 1, 9 and 2 (one stalled step), and a wait between steps and one in
  // a cancelled step: both count in the total, neither is a step's.
  ddplab::StepTimer t;
  t.add(ddplab::Phase::kDataWait, 100.0);  // before any step
  for (double wait : {1.0, 9.0, 2.0}) {
    t.begin_step();
    t.add(ddplab::Phase::kDataWait, wait);
    t.add(ddplab::Phase::kForward, 0.5);
    t.add(ddplab::Phase::kDataWait, 0.25);  // a second fetch in the same step adds up
    t.end_step();
  }
  t.begin_step();
  t.add(ddplab::Phase::kDataWait, 50.0);
  t.cancel_step();
  EXPECT_EQ(t.phase_per_step(ddplab::Phase::kDataWait), (std::vector<double>{1.25, 9.25, 2.25}));
  EXPECT_EQ(t.phase_per_step(ddplab::Phase::kForward), (std::vector<double>{0.5, 0.5, 0.5}));
  EXPECT_DOUBLE_EQ(ddplab::median(t.phase_per_step(ddplab::Phase::kDataWait)), 2.25);
  EXPECT_DOUBLE_EQ(t.total(ddplab::Phase::kDataWait), 100.0 + 12.75 + 50.0);
  t.reset();
  EXPECT_TRUE(t.phase_per_step(ddplab::Phase::kDataWait).empty());
}

TEST(StepTimer, LastStepHasItsPhasesAndWhenEachBeganAndEnded) {
  ddplab::StepTimer t;
  EXPECT_EQ(t.last_step().seconds, 0.0);  // before any step: an empty record
  t.begin_step();
  const auto before = ddplab::StepTimer::Clock::now();
  { auto s = t.scope(ddplab::Phase::kForward); }
  { auto s = t.scope(ddplab::Phase::kBackward); }
  EXPECT_TRUE(t.current_step().entered(ddplab::Phase::kBackward));  // the step in progress, so far
  EXPECT_FALSE(t.last_step().entered(ddplab::Phase::kBackward));
  // Its seconds so far, too: a step function reads its own phases before the step ends.
  t.add(ddplab::Phase::kBackward, 0.25);
  EXPECT_GE(t.current_step().phase(ddplab::Phase::kBackward), 0.25);
  { auto s = t.scope(ddplab::Phase::kForward); }  // a second forward scope: first begin, last end
  t.add(ddplab::Phase::kComm, 0.5);               // added, not scoped: counted, no boundaries
  t.end_step();
  const auto& r = t.last_step();
  EXPECT_EQ(r.seconds, t.step_seconds().back());
  EXPECT_DOUBLE_EQ(r.phase(ddplab::Phase::kComm), 0.5);
  EXPECT_GE(r.phase(ddplab::Phase::kBackward), 0.25);
  EXPECT_EQ(r.phase(ddplab::Phase::kForward), t.phase_per_step(ddplab::Phase::kForward).back());
  EXPECT_TRUE(r.entered(ddplab::Phase::kForward));
  EXPECT_TRUE(r.entered(ddplab::Phase::kBackward));
  EXPECT_FALSE(r.entered(ddplab::Phase::kComm));
  const int fwd = static_cast<int>(ddplab::Phase::kForward), bwd = static_cast<int>(ddplab::Phase::kBackward);
  EXPECT_LE(r.start, r.began[fwd]);
  EXPECT_LE(r.began[fwd], r.began[bwd]);
  EXPECT_LE(r.ended[bwd], r.ended[fwd]);  // the forward scope after backward ended last
  EXPECT_LE(r.ended[fwd], r.end);
  EXPECT_LE(before, r.began[bwd]);
  // A cancelled step leaves the last finished one in place; reset() forgets it.
  t.begin_step();
  { auto s = t.scope(ddplab::Phase::kOptimizer); }
  t.cancel_step();
  EXPECT_FALSE(t.last_step().entered(ddplab::Phase::kOptimizer));
  t.reset();
  EXPECT_FALSE(t.last_step().entered(ddplab::Phase::kForward));
}

TEST(StepTimer, EndWithoutBeginIsAnError) {
  ddplab::StepTimer t;
  EXPECT_THROW(t.end_step(), ddplab::Error);
}

TEST(PhaseName, AllNamed) {
  EXPECT_STREQ(ddplab::phase_name(ddplab::Phase::kDataWait), "data_wait");
  EXPECT_STREQ(ddplab::phase_name(ddplab::Phase::kComm), "comm");
  EXPECT_STREQ(ddplab::phase_name(ddplab::Phase::kOptimizer), "optimizer");
}

TEST(Median, OddEvenAndEmpty) {
  EXPECT_DOUBLE_EQ(ddplab::median({3, 1, 2}), 2.0);
  EXPECT_DOUBLE_EQ(ddplab::median({4, 1, 3, 2}), 2.5);
  EXPECT_THROW(ddplab::median({}), ddplab::Error);
}

TEST(Progress, PrintsEveryNStepsAndAtTheEnd) {
  ddplab::Progress p(5, 2, 512);
  EXPECT_EQ(p.update(0, 1.0), "");
  const std::string line = p.update(1, 3.0);
  EXPECT_NE(line.find("step 2/5"), std::string::npos) << line;
  EXPECT_NE(line.find("loss 2.0000"), std::string::npos) << line;  // mean over the window
  EXPECT_NE(line.find("samples/s"), std::string::npos);
  EXPECT_NE(line.find("rss"), std::string::npos);
  EXPECT_NE(line.find("ETA"), std::string::npos);
  EXPECT_EQ(p.update(2, 1.0), "");
  EXPECT_NE(p.update(3, 1.0), "");
  EXPECT_NE(p.update(4, 1.0).find("step 5/5"), std::string::npos);  // last step always prints
}

TEST(Progress, FormatsDurations) {
  EXPECT_EQ(ddplab::Progress::format_duration(42.2), "42s");
  EXPECT_EQ(ddplab::Progress::format_duration(185), "3m05s");
  EXPECT_EQ(ddplab::Progress::format_duration(3720), "1h02m");
}

}  // namespace
