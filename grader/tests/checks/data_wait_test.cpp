// Check kind data_wait: the share of a baseline's data wait a candidate hides, against the
// calibrated or the spec's reference.
#include <algorithm>
#include <vector>

#include "check_fixture.h"

namespace ddplab::grader::testing {
namespace {

class DataWaitCheck : public CheckTest {
 protected:
  void SetUp() override {
    CheckTest::SetUp();
    load(
        "[[run]]\nname = \"sync\"\nranks = 2\n\n[[run]]\nname = \"prefetch\"\nranks = 2\n\n[[check]]\nid = "
        "\"hides\"\nkind = \"data_wait\"\nname = \"hides\"\nruns = [\"sync\", \"prefetch\"]\nmin_relative = "
        "0.5\nreference = 0.8\n");
  }
  /// A report whose data wait is `ms` per step over its 4 steps.
  static json waiting(double ms) {
    json rep = good_report();
    rep["phases"]["data_wait"] = 4 * ms / 1e3;
    return rep;
  }
  /// A report of this kit: the total of its 4 steps' waits and their median.
  static json per_step(std::vector<double> ms) {
    json rep = good_report();
    double total = 0;
    for (double m : ms) total += m / 1e3;
    rep["phases"]["data_wait"] = total;
    std::sort(ms.begin(), ms.end());
    rep["phases"]["step_medians"] = {{"data_wait", (ms[1] + ms[2]) / 2 / 1e3}, {"forward", 0.01}};
    return rep;
  }
};

TEST_F(DataWaitCheck, PassesWhenMostOfTheWaitIsHidden) {
  add_run("sync", {waiting(0.8), waiting(1.0)});
  add_run("prefetch", {waiting(0.05), waiting(0.1)});
  const auto r = grade("hides");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_DOUBLE_EQ(*r.figure, 0.9);  // 1 - 0.1 / 1.0, the slowest ranks
  EXPECT_NE(r.observed.find("1.000 ms in 'sync' (rank 1), 0.100 ms in 'prefetch' (rank 1) -> 90% of it hidden"),
            std::string::npos)
      << r.observed;
}

TEST_F(DataWaitCheck, TheMedianStepShrugsOffAFewStalledSteps) {
  // Lab 08's reference on a shared 2-core VM: parsing costs ~0.23 ms a step; prefetched, a step
  // waits ~0.05 ms, except the steps where the machine stalled a thread (0.35-0.5 ms, up to a
  // third of them in the timeline of a bad moment). Here one of four: the mean (0.15 ms) would
  // hide 35%, short of the 40% required; the median hides 78%.
  add_run("sync", {per_step({0.23, 0.22, 0.24, 0.23}), per_step({0.23, 0.23, 0.23, 0.23})});
  add_run("prefetch", {per_step({0.05, 0.45, 0.05, 0.05}), per_step({0.05, 0.05, 0.05, 0.05})});
  const auto r = grade("hides");
  EXPECT_TRUE(has(r, Status::kPassed)) << r.observed;
  EXPECT_NEAR(*r.figure, 1 - 0.05 / 0.23, 1e-9);
  EXPECT_NE(r.observed.find("data wait per step (median over the steps, slowest rank): 0.230 ms in 'sync'"),
            std::string::npos)
      << r.observed;
}

TEST_F(DataWaitCheck, TheMedianStillFailsALoaderThatParsesInNext) {
  add_run("sync", {per_step({0.23, 0.22, 0.24, 0.23}), per_step({0.23, 0.23, 0.23, 0.23})});
  add_run("prefetch", {per_step({0.24, 0.23, 0.25, 0.23}), per_step({0.23, 0.22, 0.23, 0.24})});
  const auto r = grade("hides");
  EXPECT_TRUE(has(r, Status::kFailed, "made on worker threads ahead of the step")) << r.observed;
  EXPECT_LT(*r.figure, 0.0);
}

TEST_F(DataWaitCheck, AnOlderReportWithoutMediansIsJudgedOnTheMean) {
  add_run("sync", {waiting(1.0), per_step({1.0, 1.0, 1.0, 1.0})});
  add_run("prefetch", {waiting(0.1), waiting(0.1)});
  const auto r = grade("hides");
  EXPECT_TRUE(has(r, Status::kPassed));
  EXPECT_NE(r.observed.find("(mean over the steps, slowest rank)"), std::string::npos) << r.observed;
}

TEST_F(DataWaitCheck, ALoaderThatParsesInNextHidesNothing) {
  add_run("sync", {waiting(1.0), waiting(1.0)});
  add_run("prefetch", {waiting(0.95), waiting(1.02)});
  const auto r = grade("hides");
  EXPECT_TRUE(has(r, Status::kFailed, "made on worker threads ahead of the step"));
  EXPECT_NEAR(*r.figure, -0.02, 1e-12);
}

TEST_F(DataWaitCheck, TheCalibratedReferenceWins) {
  add_run("sync", {waiting(1.0), waiting(1.0)});
  add_run("prefetch", {waiting(0.7), waiting(0.7)});  // 30 % hidden: fails against 0.8 x 0.5
  EXPECT_TRUE(has(grade("hides"), Status::kFailed));
  calibration_.values["lab09_x/hides"] = 0.5;  // this machine's solution hides 50 %
  EXPECT_TRUE(has(grade("hides"), Status::kPassed));
}

TEST_F(DataWaitCheck, ABaselineWithoutWaitIsReported) {
  add_run("sync", {waiting(0), waiting(0)});
  add_run("prefetch", {waiting(0), waiting(0)});
  EXPECT_TRUE(has(grade("hides"), Status::kFailed, "parse its batches on the training thread"));
}

TEST_F(DataWaitCheck, TheRunsHaveTheSameRanks) {
  EXPECT_NE(load_error("[[run]]\nname = \"a\"\nranks = 1\n\n[[run]]\nname = \"b\"\nranks = 2\n\n[[check]]\nid = \"t\"\n"
                       "kind = \"data_wait\"\nname = \"n\"\nruns = [\"a\", \"b\"]\n")
                .find("runs 'a' and 'b' must have the same number of ranks"),
            std::string::npos);
}

}  // namespace
}  // namespace ddplab::grader::testing
