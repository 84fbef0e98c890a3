// Check kind utilization: the slowest rank's compute / wall against min_busy.
#include "check_fixture.h"

namespace ddplab::grader::testing {
namespace {

class UtilizationCheck : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    load(
        "[[run]]\nname = \"r\"\nranks = 2\n\n[[check]]\nid = \"busy\"\nkind = \"utilization\"\nname = \"busy\"\nrun = "
        "\"r\"\n"
        "min_busy = 0.8\n");
  }
};

TEST_F(UtilizationCheck, PassesWhenTheSlowestRankIsBusyEnough) {
  add_run("r", {good_report(), good_report()});  // 3.5 / 4.0
  const auto r = grade("busy");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_DOUBLE_EQ(*r.figure, 0.875);
}

TEST_F(UtilizationCheck, FailsOnTheIdleRank) {
  auto idle = good_report();
  idle["phases"]["compute"] = 2.0;
  add_run("r", {good_report(), idle});
  const auto r = grade("busy");
  EXPECT_TRUE(has(r, Status::kFailed, "the device idles"));
  EXPECT_NE(r.observed.find("50.0% on rank 1"), std::string::npos) << r.observed;
}

TEST_F(UtilizationCheck, TheOutputNamesThePhaseTimersOnCpu) {
  add_run("r", {good_report(), good_report()});
  const auto r = grade("busy");
  EXPECT_NE(r.observed.find("busy fraction (compute / wall from the phase timers) 87.5% on rank 0"), std::string::npos)
      << r.observed;
}

TEST_F(UtilizationCheck, OverlappingTimerScopesFailInsteadOfCountingAsBusy) {
  // The whole step inside an optimizer scope as well: phases add up to 7.0 s of a 4.0 s run, and a
  // busy fraction of 175 % must not pass as "busy".
  auto doubled = good_report();
  doubled["phases"]["optimizer"] = 4.0;
  doubled["phases"]["compute"] = 7.0;
  add_run("r", {good_report(), doubled});
  const auto r = grade("busy");
  EXPECT_TRUE(has(r, Status::kFailed, "timer scopes overlap"));
  EXPECT_NE(r.observed.find("rank 1: the timed phases add up to 7.000 s, more than the run's wall time 4.000 s"),
            std::string::npos)
      << r.observed;
}

TEST_F(UtilizationCheck, CommAndDataWaitCountTowardsTheTimedPhases) {
  // compute 3.5 of 4.0 s plus 1.0 s of comm: 4.5 s timed in a 4.0 s run.
  auto rep = good_report();
  rep["phases"]["comm"] = 1.0;
  add_run("r", {rep, good_report()});
  EXPECT_TRUE(has(grade("busy"), Status::kFailed, "timer scopes overlap"));
}

TEST_F(UtilizationCheck, TimedPhasesWithinTheClocksSlackPass) {
  // 3.5 s of compute and 0.58 s of comm in a 4.0 s run: within 2 % and 5 ms of the wall time.
  auto rep = good_report();
  rep["phases"]["comm"] = 0.58;
  add_run("r", {rep, good_report()});
  EXPECT_TRUE(has(grade("busy"), Status::kPassed));
}

json with_nvml(double gpu_median, int64_t samples) {
  auto rep = good_report();  // the phase timers say 87.5 %
  rep["utilization"] = {{"source", "nvml"},
                        {"busy", 0.875},
                        {"gpu_median", gpu_median},
                        {"nvml", {{"available", true}, {"samples", samples}, {"gpu_median", 100 * gpu_median}}}};
  return rep;
}

TEST_F(UtilizationCheck, OnCudaNvmlDecidesAndTheOutputSaysSo) {
  // A GPU that idles while the CPU-side timers look busy (e.g. a host-bound input pipeline):
  // NVML's figure is the one graded.
  add_run("r", {with_nvml(0.92, 40), with_nvml(0.35, 41)});
  const auto r = grade("busy");
  EXPECT_TRUE(has(r, Status::kFailed, "the device idles"));
  EXPECT_DOUBLE_EQ(*r.figure, 0.35);
  EXPECT_NE(r.observed.find("GPU utilization (NVML, median of 41 samples) 35.0% on rank 1"), std::string::npos)
      << r.observed;
}

TEST_F(UtilizationCheck, NvmlUnavailableFallsBackToThePhaseTimers) {
  auto rep = good_report();
  rep["utilization"] = {{"source", "phase_timers"},
                        {"busy", 0.875},
                        {"nvml", {{"available", false}, {"why", "libnvidia-ml.so.1 could not be loaded"}}}};
  add_run("r", {rep, with_nvml(0.95, 10)});
  const auto r = grade("busy");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_DOUBLE_EQ(*r.figure, 0.875);
  EXPECT_NE(r.observed.find("1 of 2 ranks had NVML"), std::string::npos) << r.observed;
}

TEST_F(UtilizationCheck, AMistypedFigureIsMalformed) {
  auto rep = good_report();
  rep["phases"]["wall"] = "four";
  add_run("r", {good_report(), rep});
  const auto r = grade("busy");
  EXPECT_TRUE(has(r, Status::kFailed, "outputs are missing or malformed"));
  EXPECT_EQ(r.observed, "rank 1's report: phases.wall has the wrong type");
}

TEST_F(UtilizationCheck, MinBusyIsAFraction) {
  EXPECT_NE(load_error("[[run]]\nname = \"r\"\n\n[[check]]\nid = \"t\"\nkind = \"utilization\"\nname = \"n\"\nrun = "
                       "\"r\"\nmin_busy = 90\n")
                .find("min_busy must be in 0..1"),
            std::string::npos);
  EXPECT_NE(load_error("[[run]]\nname = \"r\"\n\n[[check]]\nid = \"t\"\nkind = \"utilization\"\nname = \"n\"\nrun = "
                       "\"r\"\nmin_busy = \"high\"\n")
                .find("parameter 'min_busy' must be a number"),
            std::string::npos);
}

}  // namespace
}  // namespace ddplab::grader::testing
